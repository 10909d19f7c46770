/*
 * libFuzzer target: the ib backend's out-of-band handshake parsers, the
 * bytes a connector sends to the listener (hello, 32 bytes, then its
 * metadata, 296: ferry_ib_hello_check, ferry_ib_meta_check) and the
 * acceptor's metadata back. Input: hello | metadata | the listener's token
 * (8) | the QP count the comm expects (1: 0 = any) | the local link layer
 * (1). Accepted metadata must be what the QP bring-up can use as is (the
 * service level, port numbers and LIDs included: the address vector takes
 * them as they come); its device name is printed the way the WARNs print it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib/ib_comm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { META = 32, TOKEN = META + sizeof(ferry_ib_meta_t), TAIL = TOKEN + 8 };
    uint8_t in[TAIL + 2] = { 0 };
    ferry_ib_hello_t hello;
    ferry_ib_meta_t meta;
    uint64_t token;
    char line[128];
    int nqps, link_layer, i;
    const char *why;

    memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
    memcpy(&hello, in, sizeof(hello));
    memcpy(&meta, in + META, sizeof(meta));
    memcpy(&token, in + TOKEN, sizeof(token));
    nqps = in[TAIL] % (FERRY_IB_MAX_QPS + 1);
    link_layer = 1 + in[TAIL + 1] % 2; /* IBV_LINK_LAYER_INFINIBAND or _ETHERNET. */

    why = ferry_ib_hello_check(&hello, token);
    if (why == NULL && (hello.magic != FERRY_IB_MAGIC || hello.token != token ||
                        hello.version != FERRY_IB_WIRE_VERSION || hello.lane != 0 ||
                        hello.nlanes != 1 || hello.hdr_size != sizeof(hello)))
        abort();
    why = ferry_ib_meta_check(&meta, nqps, link_layer);
    if (why != NULL)
        return 0;
    if (meta.magic != FERRY_IB_MAGIC || meta.size != sizeof(meta) || meta.nqps < 1 ||
        meta.nqps > FERRY_IB_MAX_QPS || (nqps > 0 && meta.nqps != nqps) ||
        meta.nmembers < 1 || meta.nmembers > FERRY_IB_MAX_MEMBERS || meta.nmembers > meta.nqps ||
        memchr(meta.devname, '\0', sizeof(meta.devname)) == NULL)
        abort(); /* Accepted metadata the bring-up cannot use. */
    if (meta.sl > 15)
        abort(); /* A service level no address vector holds (4 bits). */
    for (i = 0; i < meta.nmembers; i++)
        if (meta.ports[i].link_layer != link_layer || meta.ports[i].mtu < 1 ||
            meta.ports[i].mtu > 5 || meta.ports[i].port == 0 ||
            (link_layer == 1 && meta.ports[i].lid >= 0xc000))
            abort(); /* Link, MTU, port number or a LID no RC QP can address. */
    for (i = 0; i < meta.nqps; i++)
        if (meta.qpn[i] == 0 || meta.qpn[i] > 0xffffff)
            abort();
    snprintf(line, sizeof(line), "peer device %.64s", meta.devname);
    return line[0] == 0;
}
