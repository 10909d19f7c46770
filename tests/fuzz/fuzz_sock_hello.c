/*
 * libFuzzer target: the socket backend's hello check (the first 32 bytes
 * every stream sends, ferry_sock_hello_check). Input: hello (32 bytes,
 * zero-padded) | the listener's token (8) | its stream count (1). A hello
 * the check accepts must be exactly what a ferry connector sends for that
 * listener; anything else must be refused with a reason. The same for a
 * listener that takes fewer streams (ferry_sock_hello_check_fewer): any
 * count from 1 to its offer, the lane below it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "socket/sock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t in[32 + 8 + 1] = { 0 };
    ferry_sock_hello_t hello;
    uint64_t token;
    int nlanes;
    const char *why;
    char why_buf[192];

    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    memcpy(&hello, in, sizeof(hello));
    memcpy(&token, in + 32, sizeof(token));
    nlanes = 1 + in[40] % FERRY_SOCK_MAX_LANES;
    why = ferry_sock_hello_check(&hello, token, nlanes);
    if (why == NULL &&
        (hello.magic != FERRY_SOCK_MAGIC || hello.version != FERRY_SOCK_WIRE_VERSION ||
         hello.hdr_size != sizeof(hello) || hello.token != token || hello.nlanes != nlanes ||
         hello.lane >= nlanes))
        abort(); /* Accepted a hello no ferry connector of this listener sends. */
    if (why != NULL && why[0] == '\0')
        abort(); /* A refusal must say why (it goes into the WARN). */
    /* A listener that takes fewer (NCCL_FERRY_NET_HINTS=1): nlanes is what it offered. */
    why = ferry_sock_hello_check_fewer(&hello, token, nlanes, why_buf, sizeof(why_buf));
    if (why == NULL &&
        (hello.magic != FERRY_SOCK_MAGIC || hello.version != FERRY_SOCK_WIRE_VERSION ||
         hello.hdr_size != sizeof(hello) || hello.token != token || hello.nlanes < 1 ||
         hello.nlanes > nlanes || hello.lane >= hello.nlanes))
        abort(); /* Accepted a proposal no ferry connector of this listener makes. */
    if (why != NULL && why[0] == '\0')
        abort();
    return 0;
}
