/*
 * The masks of a job's local ranks, compared for real: each rank writes its
 * affinity mask into its own fixed-size slot of a small per-job file
 * (/dev/shm/ferry-<uid>-<job key>) and reads its siblings' slots to count
 * how many run on CPUs of its own mask. core/cpu_share.h estimates that
 * count from the mask's size; a board with every sibling's slot replaces
 * the estimate, one with slots missing leaves it.
 *
 * The file is the user's own: created 0600 with O_NOFOLLOW, refused when it
 * is a symlink, not a regular file, another user's or open to others. A
 * slot counts only with the board's magic and version, its own index, a
 * checksum over its bytes (a slot read while being written fails it) and
 * the pid of a live process. Reads and writes are single pread/pwrite of
 * one slot: nothing waits for a sibling.
 */
#ifndef FERRY_CORE_MASK_BOARD_H
#define FERRY_CORE_MASK_BOARD_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY_MASK_BOARD_MAGIC   0x6472616f626b736dULL /* "mskboard" */
#define FERRY_MASK_BOARD_VERSION 1
#define FERRY_MASK_BOARD_CPUS    1024 /* CPUs a slot's mask holds; higher ones are not compared. */
#define FERRY_MASK_BOARD_SLOTS   4096 /* Most slots a board has (FERRY_LOCAL_RANKS_MAX). */

typedef struct ferry_mask_slot {
    uint64_t magic;   /* FERRY_MASK_BOARD_MAGIC. */
    uint32_t version; /* FERRY_MASK_BOARD_VERSION. */
    uint32_t index;   /* The local rank this slot belongs to (its place in the file). */
    int32_t  pid;     /* The rank's process. */
    uint32_t ncpus;   /* CPUs set in mask. */
    uint8_t  mask[FERRY_MASK_BOARD_CPUS / 8];
    uint8_t  pad[96];
    uint64_t check;   /* FNV-1a over every byte before it. */
} ferry_mask_slot_t;
_Static_assert(sizeof(ferry_mask_slot_t) == 256, "a board slot is 256 bytes");

/*
 * The job's key from the launcher, made safe for a file name (letters,
 * digits, '.', '-', '_'; anything else becomes '_'): PMIX_NAMESPACE (Open
 * MPI 5, PMIx launchers), OMPI_MCA_ess_base_jobid (Open MPI 4),
 * SLURM_JOB_ID.SLURM_STEP_ID, TORCHELASTIC_RUN_ID. 0 when none is set (no
 * board: the estimate stands).
 */
int ferry_mask_board_job_key(char *buf, size_t len);

/* "<dir>/ferry-<uid>-<key>"; 0 when there is no key or the path does not fit. */
int ferry_mask_board_path(const char *dir, char *buf, size_t len);

/*
 * Write this rank's mask into slot index (0 <= index < FERRY_MASK_BOARD_SLOTS).
 * 1 on success; 0 with why filled (the file refused, or the write failed).
 */
int ferry_mask_board_publish(const char *path, int index, const cpu_set_t *mask, char *why,
                             size_t why_len);

/*
 * Read slots 0..nslots-1 but self: *valid gets the slots that count,
 * *overlap those of them whose mask shares a CPU with mask. 1 when the file
 * could be read (even with slots missing); 0 with why filled when it was
 * refused or absent.
 */
int ferry_mask_board_read(const char *path, int self, int nslots, const cpu_set_t *mask,
                          int *valid, int *overlap, char *why, size_t why_len);

/*
 * This rank leaves the board: its slot (index, written by this process) is
 * cleared, and the file is removed when no slot of 0..nslots-1 belongs to a
 * live rank any more: the last rank to leave removes it, whichever that is,
 * without waiting for the others. 1 when this call removed the file, 0 when
 * it stays (siblings still on it) or could not be opened (why filled).
 */
int ferry_mask_board_leave(const char *path, int index, int nslots, char *why, size_t why_len);

#endif
