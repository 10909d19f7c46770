/*
 * Local rank count from the launcher's variables (local_ranks.h). Each
 * launcher documents its own:
 *   Open MPI    OMPI_COMM_WORLD_LOCAL_SIZE / OMPI_COMM_WORLD_LOCAL_RANK
 *               ("the number of ranks from this job that are running on
 *               this node" / the relative rank on this node)
 *   MVAPICH2    MV2_COMM_WORLD_LOCAL_SIZE / MV2_COMM_WORLD_LOCAL_RANK
 *   Hydra       MPI_LOCALNRANKS / MPI_LOCALRANKID (mpiexec.hydra of MPICH
 *               and Intel MPI)
 *   torchrun    LOCAL_WORLD_SIZE / LOCAL_RANK
 *   Slurm       SLURM_STEP_TASKS_PER_NODE (srun: tasks per node within the
 *               step), else SLURM_TASKS_PER_NODE, both in the compressed
 *               form "8(x4),2" indexed by SLURM_NODEID; else
 *               SLURM_NTASKS_PER_NODE (--ntasks-per-node); SLURM_LOCALID
 *               for the local rank.
 * The MPI launchers and torchrun come before Slurm: mpirun or torchrun run
 * inside a Slurm allocation inherit its SLURM_ variables, which then
 * describe the allocation, not the ranks this launcher started.
 */
#include <stdlib.h>
#include <string.h>

#include "core/local_ranks.h"
#include "core/log.h"

typedef struct ferry_local_source {
    const char *count; /* Variable holding the count... */
    const char *index; /* ...and this rank's local index. */
    int         slurm_list; /* count is Slurm's compressed list, indexed by SLURM_NODEID. */
} ferry_local_source_t;

static const ferry_local_source_t ferry_local_sources[] = {
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", 0},
    {"MV2_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", 0},
    {"MPI_LOCALNRANKS", "MPI_LOCALRANKID", 0},
    {"LOCAL_WORLD_SIZE", "LOCAL_RANK", 0},
    {"SLURM_STEP_TASKS_PER_NODE", "SLURM_LOCALID", 1},
    {"SLURM_TASKS_PER_NODE", "SLURM_LOCALID", 1},
    {"SLURM_NTASKS_PER_NODE", "SLURM_LOCALID", 0},
};

/* A decimal number in [lo, hi] and nothing else at *p; *p moves past it. */
static int ferry_local_number(const char **p, long lo, long hi, long *out)
{
    const char *s = *p;
    long v = 0;

    if (*s < '0' || *s > '9')
        return 0;
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (*s - '0');
        if (v > hi)
            return 0;
        s++;
    }
    if (v < lo)
        return 0;
    *p = s;
    *out = v;
    return 1;
}

/* The whole string is a number in [lo, hi]. */
static int ferry_local_whole(const char *s, long lo, long hi, long *out)
{
    return ferry_local_number(&s, lo, hi, out) && *s == '\0';
}

int ferry_local_ranks_slurm_list(const char *text, int node, int *count)
{
    const char *p = text;
    long at = 0, n, reps;
    int found = 0;

    if (node < 0)
        return 0;
    /* Parse it all, so a list malformed past this node's entry is refused too. */
    for (;;) {
        if (!ferry_local_number(&p, 1, FERRY_LOCAL_RANKS_MAX, &n))
            return 0;
        reps = 1;
        if (*p == '(') {
            p++;
            if (*p++ != 'x' || !ferry_local_number(&p, 1, 1L << 20, &reps) || *p++ != ')')
                return 0;
        }
        if (!found && node < at + reps) {
            *count = (int)n;
            found = 1;
        }
        at += reps;
        if (*p == '\0')
            break;
        if (*p++ != ',')
            return 0;
    }
    return found;
}

/* The node's entry of a Slurm list: SLURM_NODEID's, or the one entry all nodes share. */
static int ferry_local_slurm_count(const char *var, const char *text, long *out)
{
    const char *id = getenv("SLURM_NODEID");
    long node = 0;
    int n;

    if (id != NULL && !ferry_local_whole(id, 0, 1L << 20, &node)) {
        FERRY_WARN("SLURM_NODEID='%s' is not a node index; %s='%s' cannot be read for this node, "
                   "so it is not used for the count of local ranks", id, var, text);
        return 0;
    }
    if (!ferry_local_ranks_slurm_list(text, (int)node, &n)) {
        FERRY_WARN("%s='%s' has no entry for node %ld (SLURM_NODEID) in Slurm's form "
                   "(\"8(x4),2\"); it is not used for the count of local ranks", var, text, node);
        return 0;
    }
    /* Without SLURM_NODEID only a list that gives every node the same count says ours. */
    if (id == NULL && (strchr(text, ',') != NULL))
        return 0;
    *out = n;
    return 1;
}

int ferry_local_ranks_read(int override, ferry_local_ranks_t *lr)
{
    size_t i;

    lr->count = 0;
    lr->index = -1;
    lr->source = NULL;
    if (override > 0) {
        lr->count = override;
        lr->source = "NCCL_FERRY_LOCAL_RANKS";
        return lr->count;
    }
    for (i = 0; i < sizeof(ferry_local_sources) / sizeof(ferry_local_sources[0]); i++) {
        const ferry_local_source_t *s = &ferry_local_sources[i];
        const char *text = getenv(s->count), *idx;
        long n, k;

        if (text == NULL || *text == '\0')
            continue;
        if (s->slurm_list) {
            if (!ferry_local_slurm_count(s->count, text, &n))
                continue;
        } else if (!ferry_local_whole(text, 1, FERRY_LOCAL_RANKS_MAX, &n)) {
            FERRY_WARN("%s='%s' is not a count of ranks on this node (1..%d); it is not used "
                       "for the count of local ranks", s->count, text, FERRY_LOCAL_RANKS_MAX);
            continue;
        }
        lr->count = (int)n;
        lr->source = s->count;
        idx = getenv(s->index);
        if (idx != NULL && ferry_local_whole(idx, 0, n - 1, &k))
            lr->index = (int)k;
        else if (idx != NULL)
            FERRY_WARN("%s='%s' is not a local rank below %s=%ld; this rank's place on the node "
                       "is taken as unknown", s->index, idx, s->count, n);
        return lr->count;
    }
    return 0;
}
