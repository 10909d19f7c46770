/*
 * GPU memory on the ib backend: which pointer kinds a device takes.
 *
 * NCCL_PTR_CUDA needs a peer-memory module (nvidia-peermem, or the older
 * nv_peer_mem) so that ibv_reg_mr pins GPU pages; NCCL's IB looks for the
 * module through its sysfs files and so does ferry, under
 * NCCL_FERRY_IB_SYSFS_ROOT (tests, containers with sysfs elsewhere), or is
 * told with NCCL_FERRY_IB_GDR=1 (emulators, modules that show no file).
 * NCCL_PTR_DMABUF needs the HCA to accept dma-buf MRs (NCCL's probe, run by
 * ferry_ib_hca_probe) and libcuda to export them (its DMA_BUF_SUPPORTED
 * attribute); libcuda is loaded at run time only for that question, so a
 * host without a GPU driver still takes host memory.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/cuda_driver.h"
#include "core/log.h"
#include "ib/ib.h"

/* The files NCCL's ncclIbGdrSupport checks, relative to the sysfs root. */
static const char *const ferry_ib_gdr_files[] = {
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
};
#define FERRY_IB_GDR_NFILES (sizeof(ferry_ib_gdr_files) / sizeof(ferry_ib_gdr_files[0]))

/* 1 with the path in buf when a peer-memory module's file exists. */
static int ferry_ib_gdr_module(const char *root, char *buf, size_t len)
{
    size_t i;

    for (i = 0; i < FERRY_IB_GDR_NFILES; i++) {
        snprintf(buf, len, "%s/%s", root, ferry_ib_gdr_files[i]);
        if (access(buf, F_OK) == 0)
            return 1;
    }
    return 0;
}

/* Does libcuda export DMA-BUF fds (CUDA 11.7+ with a kernel that has dma-buf)? */
static int ferry_ib_gdr_cuda_dmabuf(char *why, size_t len)
{
    ferry_cu_device_t dev;
    int on = 0;

    if (!ferry_cu_load()) {
        snprintf(why, len, "%s", ferry_cu_why_off());
        return 0;
    }
    if (ferry_cu.device_get_attribute == NULL) {
        snprintf(why, len, "libcuda.so.1 has no cuDeviceGetAttribute");
        return 0;
    }
    if (ferry_cu.device_get(&dev, 0) != 0 ||
        ferry_cu.device_get_attribute(&on, FERRY_CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) != 0)
        on = 0;
    if (!on)
        snprintf(why, len, "the CUDA driver does not export DMA-BUF "
                 "(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0 on device 0: CUDA 11.7+ and a "
                 "kernel with dma-buf support are needed)");
    return on;
}

void ferry_ib_gdr_probe(ferry_ib_state_t *st)
{
    const char *root = st->cfg.sysfs_root[0] ? st->cfg.sysfs_root : "/sys";
    char file[320], dmabuf_why[320] = "", hcas[256] = "";
    size_t off = 0;
    int i, any_dmabuf = 0;

    st->gdr = 0;
    st->cuda_dmabuf = 0;
    if (st->cfg.gdr == 0) {
        snprintf(st->gdr_why, sizeof(st->gdr_why), "NCCL_FERRY_IB_GDR=0 turns GPU memory off");
    } else if (st->cfg.gdr == 1) {
        st->gdr = 1;
        snprintf(st->gdr_why, sizeof(st->gdr_why), "NCCL_FERRY_IB_GDR=1");
    } else if (ferry_ib_gdr_module(root, file, sizeof(file))) {
        st->gdr = 1;
        snprintf(st->gdr_why, sizeof(st->gdr_why), "peer memory: %.320s", file);
    } else {
        snprintf(st->gdr_why, sizeof(st->gdr_why),
                 "no peer-memory module (none of %.255s/{%s,%s,%s} exists): load "
                 "nvidia-peermem (modprobe nvidia-peermem), or set NCCL_FERRY_IB_GDR=1 where "
                 "GPUDirect RDMA works without it", root,
                 ferry_ib_gdr_files[0], ferry_ib_gdr_files[1], ferry_ib_gdr_files[2]);
    }
    for (i = 0; i < st->nhca; i++) {
        if (!st->hcas[i].dmabuf)
            continue;
        any_dmabuf = 1;
        off += (size_t)snprintf(hcas + off, off < sizeof(hcas) ? sizeof(hcas) - off : 0, "%s%s",
                                off ? "," : "", st->hcas[i].name);
    }
    if (st->cfg.gdr == 0)
        snprintf(dmabuf_why, sizeof(dmabuf_why), "NCCL_FERRY_IB_GDR=0");
    else if (!any_dmabuf)
        snprintf(dmabuf_why, sizeof(dmabuf_why), "no HCA accepts dma-buf MRs "
                 "(ibv_reg_dmabuf_mr: EOPNOTSUPP, or rdma-core older than 34)");
    else
        st->cuda_dmabuf = ferry_ib_gdr_cuda_dmabuf(dmabuf_why, sizeof(dmabuf_why));
    FERRY_INFO(FERRY_LOG_INIT | FERRY_LOG_NET, "ib backend GPU memory: GPUDirect RDMA %s (%s); "
               "DMA-BUF %s%s%s%s; flush %s", st->gdr ? "on" : "off", st->gdr_why,
               st->cuda_dmabuf ? "on (" : "off (", st->cuda_dmabuf ? hcas : dmabuf_why, ")",
               st->cfg.force_flush ? ", forceFlush 1" : "",
               st->cfg.gdr_flush_disable ? "disabled (NCCL_GDR_FLUSH_DISABLE=1)"
               : st->cfg.flush == FERRY_IB_FLUSH_CUDA ? "cuda (cuFlushGPUDirectRDMAWrites)"
               : st->cfg.flush == FERRY_IB_FLUSH_READ ? "read (1-byte RDMA READ on a QP "
                                                        "connected to itself)"
                                                      : "auto (each receive comm times a 1-byte "
                                                        "RDMA READ and cuFlushGPUDirectRDMAWrites "
                                                        "on its first flushes and keeps the "
                                                        "cheaper)");
}

int ferry_ib_gdr_ptr_support(const ferry_ib_dev_t *dev)
{
    int kinds = FERRY_PTR_HOST;

    if (ferry_ib_state.gdr)
        kinds |= FERRY_PTR_CUDA;
    if (ferry_ib_state.cuda_dmabuf && dev->hca->dmabuf)
        kinds |= FERRY_PTR_DMABUF;
    return kinds;
}
