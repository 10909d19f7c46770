/*
 * libFuzzer target: the socket backend's chunk header check
 * (ferry_sock_chunk_hdr_ok), the 32 bytes before every payload that tell the
 * receiver where the bytes go. Input: a header (32 bytes, zero-padded) |
 * one flag byte: bit 0 set stamps the right check word, so the fuzzer gets
 * past it to the length checks. An accepted header must place its payload
 * inside its message (no wrap past 2^64).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "socket/sock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t in[32 + 1] = { 0 };
    ferry_sock_chunk_hdr_t h;

    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    memcpy(&h, in, sizeof(h));
    if (in[32] & 1)
        h.check = FERRY_SOCK_CHUNK_CHECK(h.seq, h.len);
    if (!ferry_sock_chunk_hdr_ok(&h))
        return 0;
    if (h.nchunks == 0 || h.len > h.msg_size ||
        (unsigned __int128)h.offset + h.len > (unsigned __int128)h.msg_size ||
        h.check != FERRY_SOCK_CHUNK_CHECK(h.seq, h.len))
        abort(); /* Accepted a header whose payload leaves its message. */
    return 0;
}
