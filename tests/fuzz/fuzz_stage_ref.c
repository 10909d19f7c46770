/*
 * libFuzzer target: the connect-state reference in a connect handle
 * (core/stage_table.h), the bytes connect() reads back from a handle that
 * came from another host. Input: a 128-byte handle (zero-padded; token at
 * 40, reference at 48..63) | the connect path asking (1). Three connects are
 * in progress and one has ended. A reference must be honoured only when it
 * is bit for bit one of the live ones, for its path and its listener's
 * token, and then give that connect's stage; anything else must be refused
 * with a reason.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/stage_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LIVE 3

static int stages[LIVE];
static ferry_stage_ref_t refs[LIVE];
static const ferry_stage_kind_t kinds[LIVE] = { FERRY_STAGE_SOCK, FERRY_STAGE_IB_OOB,
                                                FERRY_STAGE_IB_CM };
static const uint64_t tokens[LIVE] = { 0x1111111111111111ULL, 0x2222222222222222ULL, 0 };

static void setup(void)
{
    static int done;
    ferry_stage_ref_t ended;
    int i;

    if (done)
        return;
    done = 1;
    for (i = 0; i < LIVE; i++)
        if (ferry_stage_put(&stages[i], kinds[i], tokens[i], &refs[i]) != FERRY_OK)
            abort();
    if (ferry_stage_put(&done, FERRY_STAGE_SOCK, tokens[0], &ended) != FERRY_OK)
        abort();
    ferry_stage_drop(&ended);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t in[128 + 1] = { 0 };
    ferry_stage_ref_t ref;
    ferry_stage_kind_t kind;
    uint64_t token;
    char why[512];
    void *stage;
    int i, match = -1;

    setup();
    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    memcpy(&token, in + 40, sizeof(token));
    memcpy(&ref, in + 48, sizeof(ref));
    kind = (ferry_stage_kind_t)(1 + in[128] % 3);
    if (ferry_stage_ref_none(&ref))
        return 0; /* A handle as listen() made it: connect() starts a new stage, reads nothing. */
    for (i = 0; i < LIVE; i++)
        if (memcmp(&ref, &refs[i], sizeof(ref)) == 0 && kind == kinds[i] && token == tokens[i])
            match = i;
    why[0] = '\0';
    stage = ferry_stage_get(&ref, kind, token, why, sizeof(why));
    if (match >= 0 && stage != &stages[match])
        abort(); /* A live connect's own reference was refused or led elsewhere. */
    if (match < 0 && stage != NULL)
        abort(); /* Honoured a reference no connect in progress made. */
    if (stage == NULL && why[0] == '\0')
        abort(); /* A refusal must say why (it goes into the WARN). */
    return 0;
}
