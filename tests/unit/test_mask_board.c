/*
 * The local ranks' mask board (core/mask_board.c) on files this test makes
 * in a temporary directory: the job key from each launcher, slots written
 * and read back (disjoint and overlapping masks), a garbage slot, a
 * wrong-magic slot, a torn slot, a dead process' slot, and files refused:
 * a symlink, a FIFO, one open to others, one of another uid (run as root).
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/mask_board.h"

static char dir[64];
static char path[256];

static const char *const key_vars[] = {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                                       "SLURM_JOB_ID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID",
                                       NULL};

static int setup(void **state)
{
    int i;

    (void)state;
    for (i = 0; key_vars[i] != NULL; i++)
        unsetenv(key_vars[i]);
    snprintf(dir, sizeof(dir), "/tmp/ferry-board-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/board", dir);
    return 0;
}

static int teardown(void **state)
{
    char p[300];

    (void)state;
    unlink(path);
    snprintf(p, sizeof(p), "%s/target", dir);
    unlink(p);
    rmdir(dir);
    return 0;
}

static void mask_of(cpu_set_t *set, int first, int n)
{
    int c;

    CPU_ZERO(set);
    for (c = first; c < first + n; c++)
        CPU_SET(c, set);
}

static void test_job_key(void **state)
{
    char key[128], p[256];

    (void)state;
    assert_int_equal(ferry_mask_board_job_key(key, sizeof(key)), 0);
    assert_int_equal(ferry_mask_board_path("/dev/shm", p, sizeof(p)), 0);
    setenv("TORCHELASTIC_RUN_ID", "run/../x y", 1);
    assert_int_equal(ferry_mask_board_job_key(key, sizeof(key)), 1);
    assert_string_equal(key, "torch.run_.._x_y"); /* No '/' reaches the file name. */
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    assert_int_equal(ferry_mask_board_job_key(key, sizeof(key)), 1);
    assert_string_equal(key, "slurm.4242.0");
    setenv("OMPI_MCA_ess_base_jobid", "12345", 1);
    assert_int_equal(ferry_mask_board_job_key(key, sizeof(key)), 1);
    assert_string_equal(key, "ompi.12345");
    setenv("PMIX_NAMESPACE", "prterun-host-1234@1", 1);
    assert_int_equal(ferry_mask_board_path("/dev/shm", p, sizeof(p)), 1);
    snprintf(key, sizeof(key), "/dev/shm/ferry-%u-pmix.prterun-host-1234_1", (unsigned)geteuid());
    assert_string_equal(p, key);
    /* A key too long for the buffer: no board, never a cut name. */
    assert_int_equal(ferry_mask_board_job_key(key, 8), 0);
}

/* Four ranks: 0 and 1 share CPUs 0-7, 2 and 3 own 8-11 and 12-15. */
static void test_publish_and_read(void **state)
{
    cpu_set_t m[4];
    char why[512];
    struct stat st;
    int valid, overlap, i;

    (void)state;
    mask_of(&m[0], 0, 8);
    mask_of(&m[1], 0, 8);
    mask_of(&m[2], 8, 4);
    mask_of(&m[3], 12, 4);
    for (i = 0; i < 4; i++)
        assert_int_equal(ferry_mask_board_publish(path, i, &m[i], why, sizeof(why)), 1);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(ferry_mask_board_read(path, 0, 4, &m[0], &valid, &overlap, why,
                                           sizeof(why)), 1);
    assert_int_equal(valid, 3);
    assert_int_equal(overlap, 1);
    assert_int_equal(ferry_mask_board_read(path, 2, 4, &m[2], &valid, &overlap, why,
                                           sizeof(why)), 1);
    assert_int_equal(valid, 3);
    assert_int_equal(overlap, 0);
    /* Eight slots asked, four written: the missing ones do not count. */
    assert_int_equal(ferry_mask_board_read(path, 3, 8, &m[3], &valid, &overlap, why,
                                           sizeof(why)), 1);
    assert_int_equal(valid, 3);
    printf("board of 4: rank 0 sees 3 slots, 1 overlapping; rank 2 sees 3, none overlapping\n");
}

/* Slots that do not count: garbage, wrong magic, torn, another index, a dead process'. */
static void test_bad_slots(void **state)
{
    ferry_mask_slot_t s;
    cpu_set_t m;
    char why[512];
    int fd, valid, overlap, i;
    pid_t dead;

    (void)state;
    mask_of(&m, 0, 4);
    for (i = 0; i < 6; i++)
        assert_int_equal(ferry_mask_board_publish(path, i, &m, why, sizeof(why)), 1);
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    /* 1: garbage. */
    memset(&s, 0x5a, sizeof(s));
    assert_int_equal(pwrite(fd, &s, sizeof(s), 1 * (off_t)sizeof(s)), (ssize_t)sizeof(s));
    /* 2: wrong magic, the rest as written. */
    assert_int_equal(pread(fd, &s, sizeof(s), 2 * (off_t)sizeof(s)), (ssize_t)sizeof(s));
    s.magic ^= 1;
    assert_int_equal(pwrite(fd, &s, sizeof(s), 2 * (off_t)sizeof(s)), (ssize_t)sizeof(s));
    /* 3: torn (a mask byte changed after the checksum). */
    assert_int_equal(pread(fd, &s, sizeof(s), 3 * (off_t)sizeof(s)), (ssize_t)sizeof(s));
    s.mask[0] ^= 0x80;
    assert_int_equal(pwrite(fd, &s, sizeof(s), 3 * (off_t)sizeof(s)), (ssize_t)sizeof(s));
    /* 4: slot 5's bytes copied into slot 4 (its index says 5). */
    assert_int_equal(pread(fd, &s, sizeof(s), 5 * (off_t)sizeof(s)), (ssize_t)sizeof(s));
    assert_int_equal(pwrite(fd, &s, sizeof(s), 4 * (off_t)sizeof(s)), (ssize_t)sizeof(s));
    close(fd);
    /* 5: written by a process that has exited. */
    dead = fork();
    assert_true(dead >= 0);
    if (dead == 0)
        _exit(ferry_mask_board_publish(path, 5, &m, why, sizeof(why)) ? 0 : 1);
    assert_int_equal(waitpid(dead, &i, 0), dead);
    assert_true(WIFEXITED(i) && WEXITSTATUS(i) == 0);
    assert_int_equal(ferry_mask_board_read(path, 0, 6, &m, &valid, &overlap, why, sizeof(why)),
                     1);
    assert_int_equal(valid, 0);
    assert_int_equal(overlap, 0);
}

/*
 * Leaving: a rank clears only its own slot; the file stays while a live
 * rank's slot is on it and goes with the last one to leave (a dead rank's
 * slot counts as left).
 */
static void test_leave(void **state)
{
    cpu_set_t m;
    char why[512], c;
    int to_child[2], from_child[2], valid, overlap, st;
    pid_t child;

    (void)state;
    mask_of(&m, 0, 2);
    assert_int_equal(ferry_mask_board_publish(path, 0, &m, why, sizeof(why)), 1);
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(from_child), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        int ok = ferry_mask_board_publish(path, 1, &m, why, sizeof(why));

        close(to_child[1]); /* Else the read below never sees the parent's close. */

        (void)!write(from_child[1], ok ? "y" : "n", 1);
        (void)!read(to_child[0], &c, 1);
        _exit(0);
    }
    assert_int_equal(read(from_child[0], &c, 1), 1);
    assert_int_equal(c, 'y');
    /* The sibling in slot 1 lives: this rank's slot goes, the file stays. */
    assert_int_equal(ferry_mask_board_leave(path, 0, 3, why, sizeof(why)), 0);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(ferry_mask_board_read(path, 1, 3, &m, &valid, &overlap, why, sizeof(why)), 1);
    assert_int_equal(valid, 0);
    /* Slot 1 is the sibling's: leaving as index 1 does not clear it. */
    assert_int_equal(ferry_mask_board_leave(path, 1, 3, why, sizeof(why)), 0);
    assert_int_equal(ferry_mask_board_read(path, 0, 3, &m, &valid, &overlap, why, sizeof(why)), 1);
    assert_int_equal(valid, 1);
    /* The sibling exits without leaving (a crash): its slot no longer counts; the file goes. */
    close(to_child[1]);
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_int_equal(ferry_mask_board_leave(path, 0, 3, why, sizeof(why)), 1);
    assert_int_equal(access(path, F_OK), -1);
    /* Gone already: 0 and why. */
    assert_int_equal(ferry_mask_board_leave(path, 0, 3, why, sizeof(why)), 0);
    assert_non_null(strstr(why, path));
    close(to_child[0]);
    close(from_child[0]);
    close(from_child[1]);
    printf("leave: own slot cleared, a live sibling keeps the file, the last (a crashed sibling's "
           "slot aside) removes it\n");
}

/* Files that are not this user's own closed regular file: refused, with the reason. */
static void test_refused_files(void **state)
{
    char target[300], why[512];
    cpu_set_t m;
    int valid, overlap;

    (void)state;
    mask_of(&m, 0, 2);
    /* A symlink, to a file that would otherwise do. */
    snprintf(target, sizeof(target), "%s/target", dir);
    assert_int_equal(ferry_mask_board_publish(target, 0, &m, why, sizeof(why)), 1);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(ferry_mask_board_publish(path, 1, &m, why, sizeof(why)), 0);
    assert_non_null(strstr(why, "a symbolic link, refused"));
    assert_int_equal(ferry_mask_board_read(path, 1, 2, &m, &valid, &overlap, why, sizeof(why)),
                     0);
    assert_non_null(strstr(why, "a symbolic link, refused"));
    unlink(path);
    /* A FIFO: opened without waiting, refused as not a regular file. */
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(ferry_mask_board_read(path, 1, 2, &m, &valid, &overlap, why, sizeof(why)),
                     0);
    assert_non_null(strstr(why, "is not a regular file"));
    unlink(path);
    /* Open to others. */
    assert_int_equal(ferry_mask_board_publish(path, 0, &m, why, sizeof(why)), 1);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(ferry_mask_board_read(path, 1, 2, &m, &valid, &overlap, why, sizeof(why)),
                     0);
    assert_non_null(strstr(why, "is open to other users (mode 644)"));
    assert_int_equal(ferry_mask_board_publish(path, 1, &m, why, sizeof(why)), 0);
    assert_int_equal(chmod(path, 0600), 0);
    /* Another user's: only root can make one. */
    if (geteuid() == 0) {
        assert_int_equal(chown(path, 1, 1), 0);
        assert_int_equal(ferry_mask_board_read(path, 1, 2, &m, &valid, &overlap, why,
                                               sizeof(why)), 0);
        assert_non_null(strstr(why, "belongs to uid 1, not this process' 0"));
        printf("another uid's board: refused (%s)\n", why);
    } else {
        printf("another uid's board: not tried (not root)\n");
    }
    /* Absent: no board, the estimate stands. */
    unlink(path);
    assert_int_equal(ferry_mask_board_read(path, 1, 2, &m, &valid, &overlap, why, sizeof(why)),
                     0);
    assert_non_null(strstr(why, "No such file"));
    /* A slot index outside the board. */
    assert_int_equal(ferry_mask_board_publish(path, FERRY_MASK_BOARD_SLOTS, &m, why,
                                              sizeof(why)), 0);
    assert_non_null(strstr(why, "outside the board's 0..4095"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_job_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_publish_and_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
