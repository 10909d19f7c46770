/*
 * What the socket configuration tests (test_sock_config.c,
 * test_sock_config_cpus.c) share: one row per variable of the socket
 * backend's table, the launchers' variables, and the setup that clears both.
 * Include after <cmocka.h>.
 */
#ifndef FERRY_TEST_SOCK_CONFIG_UTIL_H
#define FERRY_TEST_SOCK_CONFIG_UTIL_H

#include <stdlib.h>

#include "test_config_util.h"

#include "socket/sock_config.h"

/*
 * One row per variable of the socket backend's table: a value from the
 * environment, what the effective-config line then shows (a prefix where
 * the line shows another variable's source for both, as zerocopy= does), a
 * bad value and the accepted values its WARN quotes.
 */
typedef struct sock_var_case {
    ferry_sock_cfg_id_t id;
    const char         *name;
    const char         *good;
    const char         *shown;
    const char         *bad;
    const char         *help;
} sock_var_case_t;

static const sock_var_case_t sock_vars[] = {
    {FERRY_SOCK_CFG_SOCKET_NTHREADS, "NCCL_SOCKET_NTHREADS", "2", "streams=2(derived)", "17",
     "helper threads per connection, 1..16"},
    {FERRY_SOCK_CFG_NSOCKS_PERTHREAD, "NCCL_NSOCKS_PERTHREAD", "2", "streams=8(derived)", "0",
     "TCP streams per helper thread, 1..64"},
    {FERRY_SOCK_CFG_STREAMS, "NCCL_FERRY_STREAMS", "5", "streams=5(env)", "0",
     "TCP streams per connection, 1..64"},
    {FERRY_SOCK_CFG_THREADS, "NCCL_FERRY_THREADS", "2", "threads=2(env)", "17",
     "helper threads per connection, 0..16 (0: NCCL's thread moves the data)"},
    {FERRY_SOCK_CFG_CHUNK_MIN, "NCCL_SOCKET_MIN_TASKSIZE", "128K", "chunk=131072..1048576(env)",
     "65M", "smallest chunk per stream, 4K..64M"},
    {FERRY_SOCK_CFG_CHUNK_MAX, "NCCL_FERRY_CHUNK_SIZE", "2M", "chunk=65536..2097152(env)", "1",
     "largest chunk per stream, 4K..64M"},
    {FERRY_SOCK_CFG_SOCKET_SNDBUF, "NCCL_SOCKET_SNDBUF", "4M", "sndbuf=4194304(env)", "-2",
     "SO_SNDBUF bytes, -1 keeps the kernel default"},
    {FERRY_SOCK_CFG_SOCKET_RCVBUF, "NCCL_SOCKET_RCVBUF", "1M", "rcvbuf=1048576(env)", "3G",
     "SO_RCVBUF bytes, -1 keeps the kernel default"},
    {FERRY_SOCK_CFG_SPIN_US, "NCCL_FERRY_SPIN_US", "50", "spin=50us(env)", "-2",
     "us helper threads keep polling before they sleep, -1 auto (0)"},
    {FERRY_SOCK_CFG_INJECT_DELAY_US, "NCCL_FERRY_INJECT_DELAY_US", "7", "inject_delay=7us(env)",
     "x", "test knob: us added to every chunk completion"},
    {FERRY_SOCK_CFG_SPEED_MBPS, "NCCL_FERRY_SPEED_MBPS", "25000", "speed=25000Mbps(env)",
     "100000001", "device speed reported to NCCL in Mbps, -1 auto"},
    {FERRY_SOCK_CFG_INLINE_MAX, "NCCL_FERRY_INLINE_MAX", "1M", "inline_max=1048576(env)", "65M",
     "isends up to this size are sent by NCCL's own thread, 0..64M"},
    {FERRY_SOCK_CFG_NOTSENT_LOWAT, "NCCL_FERRY_NOTSENT_LOWAT", "128K",
     "notsent_lowat=131072(env)", "-1",
     "TCP_NOTSENT_LOWAT bytes on data streams, 0 keeps the kernel's"},
    {FERRY_SOCK_CFG_ASSIST_MAX, "NCCL_FERRY_ASSIST_MAX", "16K", "assist_max=16384(env)", "65M",
     "-1 (follow NCCL_FERRY_INLINE_MAX) or a size up to 64M (messages NCCL's thread moves on "
     "stream 0 inside test())"},
    {FERRY_SOCK_CFG_ZEROCOPY, "NCCL_FERRY_ZEROCOPY", "2", "zerocopy=2/65536(env)", "3",
     "0, 1 or 2 (1: large chunks are sent with MSG_ZEROCOPY, falling back to copies where the "
     "kernel copies anyway; 2: never fall back, for tests)"},
    {FERRY_SOCK_CFG_ZEROCOPY_MIN, "NCCL_FERRY_ZEROCOPY_MIN", "8K", "zerocopy=0/8192(", "1K",
     "4K..64M (smallest chunk sent with MSG_ZEROCOPY)"},
    {FERRY_SOCK_CFG_SOLO_MAX, "NCCL_FERRY_SOLO_MAX", "0", "solo_max=0(env)", "65M",
     "0..64M (while one comm is all that sends or receives in the process, NCCL's thread moves "
     "messages up to this itself; 0: off)"},
    {FERRY_SOCK_CFG_RESCUE_US, "NCCL_FERRY_RESCUE_US", "0", "rescue=0us(env)", "2000000",
     "0..1000000 (test() moves a send of at most 256 KiB that no helper thread has taken this "
     "many us after its post; 0: off)"},
    {FERRY_SOCK_CFG_GPU_STAGING, "NCCL_FERRY_GPU_STAGING", "1", "gpu_staging=1(env)", "2",
     "0 or 1 (1: the socket backend takes GPU buffers, staged through pinned host memory by the "
     "GPU's copy engines)"},
    {FERRY_SOCK_CFG_EPOLL, "NCCL_FERRY_EPOLL", "1", "epoll=1(env)", "on",
     "0 or 1, no effect (kept so job scripts that set it still start): the helper pool always "
     "waits in epoll, each stream registered once"},
    {FERRY_SOCK_CFG_SOCKET_TIMEOUT_S, "NCCL_FERRY_SOCKET_TIMEOUT_S", "0", "socket_timeout=0s(env)",
     "3601",
     "0..3600 (s a peer may stay silent or leave sent bytes unacknowledged before its stream "
     "fails: TCP keepalive and TCP_USER_TIMEOUT on every data stream; 0: kernel defaults)"},
    {FERRY_SOCK_CFG_IGNORE_CPU_AFFINITY, "NCCL_IGNORE_CPU_AFFINITY", "1",
     "ignore_cpu_affinity=1(env)", "x",
     "an integer (non-zero: streams and threads are chosen for every online CPU, not the "
     "process' affinity mask)"},
    {FERRY_SOCK_CFG_SEND_THREADS, "NCCL_FERRY_SEND_THREADS", "0", "send_threads=0(env)", "17",
     "-1 (as NCCL_FERRY_THREADS; 1 on 2 CPUs a launcher gave) or helper threads per send "
     "connection, 0..16"},
    {FERRY_SOCK_CFG_RECV_THREADS, "NCCL_FERRY_RECV_THREADS", "1", "recv_threads=1(env)", "-2",
     "-1 (as NCCL_FERRY_THREADS) or helper threads per receive connection, 0..16"},
    {FERRY_SOCK_CFG_HELPER_PLACE, "NCCL_FERRY_HELPER_PLACE", "away", "helper_place=away(env)",
     "near", "auto (away on 2 CPUs a launcher gave, mask otherwise), mask (helper threads run "
     "anywhere in the process' CPU mask, near the NIC where it can) or away (the same, but off "
     "the CPU NCCL's thread last posted from)"},
    {FERRY_SOCK_CFG_POOL_THREADS, "NCCL_FERRY_POOL_THREADS", "3", "pool_threads=3(env)", "65",
     "-1 (auto: the largest of NCCL_FERRY_THREADS, NCCL_SOCKET_NTHREADS, NCCL_FERRY_SEND_THREADS "
     "and NCCL_FERRY_RECV_THREADS where one is set, else from the CPU budget) or 1..64: helper "
     "threads of the process' one pool, which serves every connection's streams; the "
     "per-connection settings then say over how many of them one connection's streams spread"},
    {FERRY_SOCK_CFG_LOCAL_RANKS, "NCCL_FERRY_LOCAL_RANKS", "8", "local_ranks=8(env)", "4097",
     "0..4096 (ranks of the job on this node, sharing its CPUs; 0: as the launcher's "
     "variables say: OMPI_COMM_WORLD_LOCAL_SIZE, MV2_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, "
     "LOCAL_WORLD_SIZE, SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE, "
     "SLURM_NTASKS_PER_NODE)"},
    {FERRY_SOCK_CFG_CALLER_RECV_BURST, "NCCL_FERRY_CALLER_RECV_CHUNKS", "4",
     "caller_recv_chunks=4(env)", "17", "chunks NCCL's thread reads per call on a receive stream, 1..16"},
};
#define NSOCK_VARS ((int)(sizeof(sock_vars) / sizeof(sock_vars[0])))

/* What launchers set: a runner started under one must not change these tests' CPU counts. */
static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALNRANKS", "MPI_LOCALRANKID", "LOCAL_WORLD_SIZE",
    "LOCAL_RANK", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE",
    "SLURM_NODEID", "SLURM_LOCALID", NULL,
};

static int clear_env(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < NSOCK_VARS; i++)
        unsetenv(sock_vars[i].name);
    for (i = 0; launcher_vars[i] != NULL; i++)
        unsetenv(launcher_vars[i]);
    last_warn[0] = '\0';
    return 0;
}

#endif
