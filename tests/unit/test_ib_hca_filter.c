/* NCCL_IB_HCA parsing and matching, case by case against NCCL 2.30's rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "ib/ib_hca_filter.h"

typedef struct filter_case {
    const char *hca;  /* NCCL_IB_HCA. */
    const char *dev;
    int         port;
    int         pass; /* What NCCL decides. */
} filter_case_t;

static const filter_case_t cases[] = {
    /* No filter: everything. */
    {NULL, "mlx5_0", 1, 1},
    {"", "mlx5_0", 1, 1},
    /* Prefixes: mlx5_1 takes mlx5_10..19 too. */
    {"mlx5_1", "mlx5_1", 1, 1},
    {"mlx5_1", "mlx5_10", 1, 1},
    {"mlx5_1", "mlx5_2", 1, 0},
    {"mlx5", "mlx5_7", 2, 1},
    {"mlx5_10", "mlx5_1", 1, 0},
    /* Exact names. */
    {"=mlx5_1", "mlx5_1", 1, 1},
    {"=mlx5_1", "mlx5_10", 1, 0},
    {"=mlx5", "mlx5_0", 1, 0},
    /* Ports. */
    {"=mlx5_0:1,mlx5_1:1", "mlx5_0", 1, 1},
    {"=mlx5_0:1,mlx5_1:1", "mlx5_0", 2, 0},
    {"=mlx5_0:1,mlx5_1:1", "mlx5_1", 1, 1},
    {"=mlx5_0:1,mlx5_1:1", "mlx5_2", 1, 0},
    {"mlx5_0:2", "mlx5_0", 2, 1},
    {"mlx5_0:2", "mlx5_0", 1, 0},
    /* NCCL reads the port with atoi. */
    {"mlx5_0:1x", "mlx5_0", 1, 1},
    /* An empty port is any port (NCCL 2.30), with or without a rail after it. */
    {"mlx5_0:", "mlx5_0", 2, 1},
    {"mlx5_0::3", "mlx5_0", 2, 1},
    /* Rail and plane do not change what matches. */
    {"mlx5_0:1:0:1,mlx5_3", "mlx5_3", 1, 1},
    {"mlx5_0:1:0:1,mlx5_3", "mlx5_0", 2, 0},
    {"^mlx5_0:1:0:1", "mlx5_0", 1, 0},
    /* Exclusions. */
    {"^mlx5_1", "mlx5_1", 1, 0},
    {"^mlx5_1", "mlx5_10", 1, 0},
    {"^mlx5_1", "mlx5_0", 1, 1},
    {"^=mlx5_1", "mlx5_1", 1, 0},
    {"^=mlx5_1", "mlx5_10", 1, 1},
    {"^mlx5_0:1", "mlx5_0", 2, 1},
    {"^mlx5_0:1", "mlx5_0", 1, 0},
    /* "^" alone: an empty list matches everything, and ^ inverts that. */
    {"^", "mlx5_0", 1, 0},
    /* Empty entries are dropped. */
    {",,mlx5_2,,", "mlx5_2", 1, 1},
    {",,mlx5_2,,", "mlx5_3", 1, 0},
    /* "=" before "^" is a name character, as in NCCL. */
    {"=^mlx5_0", "mlx5_0", 1, 0},
};

static void test_cases(void **state)
{
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ferry_ib_hca_filter_t f;
        int got;

        assert_int_equal(ferry_ib_hca_filter_parse(cases[i].hca, &f), 0);
        got = ferry_ib_hca_filter_match(&f, cases[i].dev, cases[i].port);
        if (got != cases[i].pass)
            fail_msg("NCCL_IB_HCA='%s' dev %s:%d: got %d, NCCL says %d",
                     cases[i].hca ? cases[i].hca : "(unset)", cases[i].dev, cases[i].port, got,
                     cases[i].pass);
    }
}

static void test_parsed_fields(void **state)
{
    ferry_ib_hca_filter_t f;

    (void)state;
    assert_int_equal(ferry_ib_hca_filter_parse("^=mlx5_0:1,mlx5_3", &f), 0);
    assert_int_equal(f.exclude, 1);
    assert_int_equal(f.exact, 1);
    assert_int_equal(f.n, 2);
    assert_string_equal(f.entries[0].name, "mlx5_0");
    assert_int_equal(f.entries[0].port, 1);
    assert_string_equal(f.entries[1].name, "mlx5_3");
    assert_int_equal(f.entries[1].port, -1);
}

static void test_limits(void **state)
{
    char text[2048], name[80];
    ferry_ib_hca_filter_t f;
    size_t off = 0;
    int i;

    (void)state;
    /* 40 exact entries: NCCL keeps the first 32 (MAX_IB_DEVS). */
    for (i = 0; i < 40; i++)
        off += (size_t)snprintf(text + off, sizeof(text) - off, "%sdev%d", i ? "," : "=", i);
    assert_int_equal(ferry_ib_hca_filter_parse(text, &f), 0);
    assert_int_equal(f.n, FERRY_IB_HCA_FILTER_MAX);
    assert_true(ferry_ib_hca_filter_match(&f, "dev31", 1));
    assert_false(ferry_ib_hca_filter_match(&f, "dev35", 1));
    /* A name NCCL could not hold is refused rather than cut. */
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_int_equal(ferry_ib_hca_filter_parse(name, &f), FERRY_IB_HCA_ERR_NAME);
    name[FERRY_IB_HCA_NAME_MAX - 1] = '\0';
    assert_int_equal(ferry_ib_hca_filter_parse(name, &f), 0);
}

/* name:port:rail:plane, fields empty or absent read -1 (NCCL 2.30's parseStringList). */
static void test_rail_plane_fields(void **state)
{
    static const struct {
        const char *entry;
        int         port, rail, plane;
    } good[] = {
        {"mlx5_0", -1, -1, -1},
        {"mlx5_0:1", 1, -1, -1},
        {"mlx5_0:1:0", 1, 0, -1},
        {"mlx5_0:1:0:1", 1, 0, 1},
        {"mlx5_0::2", -1, 2, -1},
        {"mlx5_0:::3", -1, -1, 3},
        {"mlx5_0:2::3", 2, -1, 3},
        {"mlx5_0:1:32767:32767", 1, 32767, 32767},
        {"mlx5_0:1:007:00", 1, 7, 0},
        {"mlx5_0:1::", 1, -1, -1},
    };
    char why[256];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        ferry_ib_hca_filter_t f;
        int rc = ferry_ib_hca_filter_parse_why(good[i].entry, &f, why, sizeof(why));

        if (rc != 0 || f.n != 1 || strcmp(f.entries[0].name, "mlx5_0") != 0 ||
            f.entries[0].port != good[i].port || f.entries[0].rail != good[i].rail ||
            f.entries[0].plane != good[i].plane)
            fail_msg("NCCL_IB_HCA='%s': rc %d (%s), n %d, port %d rail %d plane %d; want "
                     "port %d rail %d plane %d", good[i].entry, rc, why, f.n, f.entries[0].port,
                     f.entries[0].rail, f.entries[0].plane, good[i].port, good[i].rail,
                     good[i].plane);
        assert_string_equal(why, "");
    }
}

/* Which rail and plane a port gets: the first entry naming it; none from an exclusion. */
static void test_rail_plane_ids(void **state)
{
    ferry_ib_hca_filter_t f;
    int rail, plane;

    (void)state;
    assert_int_equal(ferry_ib_hca_filter_parse("=mlx5_0:1:0:1,mlx5_0:2:1,mlx5_1::5:2,mlx5_1", &f),
                     0);
    ferry_ib_hca_filter_ids(&f, "mlx5_0", 1, &rail, &plane);
    assert_int_equal(rail, 0);
    assert_int_equal(plane, 1);
    ferry_ib_hca_filter_ids(&f, "mlx5_0", 2, &rail, &plane);
    assert_int_equal(rail, 1);
    assert_int_equal(plane, -1);
    ferry_ib_hca_filter_ids(&f, "mlx5_1", 2, &rail, &plane); /* mlx5_1::5:2 comes first. */
    assert_int_equal(rail, 5);
    assert_int_equal(plane, 2);
    ferry_ib_hca_filter_ids(&f, "mlx5_10", 1, &rail, &plane); /* Not named (exact). */
    assert_int_equal(rail, -1);
    assert_int_equal(plane, -1);
    /* A prefix entry gives its rail to every device it takes. */
    assert_int_equal(ferry_ib_hca_filter_parse("mlx5_1:1:4:6", &f), 0);
    ferry_ib_hca_filter_ids(&f, "mlx5_12", 1, &rail, &plane);
    assert_int_equal(rail, 4);
    assert_int_equal(plane, 6);
    /* An exclusion's rail and plane are checked but name nothing: the ports left have none. */
    assert_int_equal(ferry_ib_hca_filter_parse("^mlx5_0:1:3:4", &f), 0);
    assert_int_equal(f.entries[0].rail, 3);
    assert_true(ferry_ib_hca_filter_match(&f, "mlx5_0", 2));
    ferry_ib_hca_filter_ids(&f, "mlx5_0", 2, &rail, &plane);
    assert_int_equal(rail, -1);
    assert_int_equal(plane, -1);
    ferry_ib_hca_filter_ids(&f, "mlx5_0", 1, &rail, &plane);
    assert_int_equal(rail, -1);
    assert_int_equal(plane, -1);
    /* No list: nothing known. */
    assert_int_equal(ferry_ib_hca_filter_parse(NULL, &f), 0);
    ferry_ib_hca_filter_ids(&f, "mlx5_0", 1, &rail, &plane);
    assert_int_equal(rail, -1);
    assert_int_equal(plane, -1);
}

/* Each bad form: its code and the words that say which entry, which field, what is wanted. */
static void test_rail_plane_bad(void **state)
{
    static const struct {
        const char *text;
        int         rc;
        const char *why;
    } bad[] = {
        {"mlx5_0:1:junk", FERRY_IB_HCA_ERR_RAIL,
         "entry 'mlx5_0:1:junk': rail 'junk' is not a number 0..32767 (leave it empty for none)"},
        {"mlx5_0:1:-1", FERRY_IB_HCA_ERR_RAIL,
         "entry 'mlx5_0:1:-1': rail '-1' is not a number 0..32767 (leave it empty for none)"},
        {"mlx5_0:1:32768", FERRY_IB_HCA_ERR_RAIL,
         "entry 'mlx5_0:1:32768': rail '32768' is not a number 0..32767"},
        {"mlx5_0:1:99999999999999999999", FERRY_IB_HCA_ERR_RAIL,
         "rail '99999999999999999999' is not a number 0..32767"},
        {"mlx5_0:1:1x", FERRY_IB_HCA_ERR_RAIL, "rail '1x' is not a number"},
        {"mlx5_0:1: 1", FERRY_IB_HCA_ERR_RAIL, "rail ' 1' is not a number"},
        {"mlx5_0:1:+1", FERRY_IB_HCA_ERR_RAIL, "rail '+1' is not a number"},
        {"mlx5_1,mlx5_0:1:0:x,mlx5_2", FERRY_IB_HCA_ERR_PLANE,
         "entry 'mlx5_0:1:0:x': plane 'x' is not a number 0..32767 (leave it empty for none)"},
        {"mlx5_0:1:0:-3", FERRY_IB_HCA_ERR_PLANE, "plane '-3' is not a number 0..32767"},
        {"mlx5_0:1:0:40000", FERRY_IB_HCA_ERR_PLANE, "plane '40000' is not a number 0..32767"},
        {"mlx5_0:1:0:1:9", FERRY_IB_HCA_ERR_FIELDS,
         "entry 'mlx5_0:1:0:1:9': 5 fields; an entry is name[:port[:rail[:plane]]]"},
        {"mlx5_0:1:0:1:", FERRY_IB_HCA_ERR_FIELDS, "5 fields"},
        /* An exclusion's fields are checked too. */
        {"^mlx5_0:1:r0", FERRY_IB_HCA_ERR_RAIL, "entry 'mlx5_0:1:r0': rail 'r0'"},
        /* Past the 32 entries kept, still checked. */
        {"a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,x,y,z,A,B,C,D,E,F,G,H:1:bad",
         FERRY_IB_HCA_ERR_RAIL, "entry 'H:1:bad': rail 'bad'"},
    };
    char why[256];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ferry_ib_hca_filter_t f;
        int rc = ferry_ib_hca_filter_parse_why(bad[i].text, &f, why, sizeof(why));

        if (rc != bad[i].rc || strstr(why, bad[i].why) == NULL)
            fail_msg("NCCL_IB_HCA='%s': rc %d why '%s'; want rc %d and '%s'", bad[i].text, rc,
                     why, bad[i].rc, bad[i].why);
        /* Without a buffer: the same code. */
        assert_int_equal(ferry_ib_hca_filter_parse(bad[i].text, &f), bad[i].rc);
    }
}

/*
 * Random text over the characters that matter: every answer is 0 or a known
 * code, why says something exactly when refused, and what is kept is in range.
 */
static void test_random_text(void **state)
{
    static const char alphabet[] = "mlx5_:,^=0123456789-x ";
    unsigned seed = 12345;
    int i, refused = 0;

    (void)state;
    for (i = 0; i < 20000; i++) {
        char text[48], why[256];
        ferry_ib_hca_filter_t f;
        int len, j, rc;

        seed = seed * 1103515245u + 12345u;
        len = (int)(seed >> 16) % (int)sizeof(text);
        for (j = 0; j < len; j++) {
            seed = seed * 1103515245u + 12345u;
            text[j] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
        }
        text[len] = '\0';
        rc = ferry_ib_hca_filter_parse_why(text, &f, why, sizeof(why));
        if (rc != 0 && rc != FERRY_IB_HCA_ERR_NAME && rc != FERRY_IB_HCA_ERR_RAIL &&
            rc != FERRY_IB_HCA_ERR_PLANE && rc != FERRY_IB_HCA_ERR_FIELDS)
            fail_msg("'%s': code %d", text, rc);
        if ((rc != 0) != (why[0] != '\0'))
            fail_msg("'%s': code %d, why '%s'", text, rc, why);
        refused += rc != 0;
        for (j = 0; rc == 0 && j < f.n; j++)
            if (f.entries[j].name[0] == '\0' || f.entries[j].rail < -1 ||
                f.entries[j].rail > FERRY_IB_HCA_ID_MAX || f.entries[j].plane < -1 ||
                f.entries[j].plane > FERRY_IB_HCA_ID_MAX)
                fail_msg("'%s': entry %d kept as '%s' rail %d plane %d", text, j,
                         f.entries[j].name, f.entries[j].rail, f.entries[j].plane);
    }
    printf("  20000 random NCCL_IB_HCA texts: %d refused with a reason, the rest in range\n",
           refused);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_parsed_fields),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_rail_plane_fields),
        cmocka_unit_test(test_rail_plane_ids),
        cmocka_unit_test(test_rail_plane_bad),
        cmocka_unit_test(test_random_text),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
