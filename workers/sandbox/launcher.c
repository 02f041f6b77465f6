/* The first exec of a contained run (workers/sandbox/launch.py): sets the run's rlimits, drops to its uid and
   gid with no supplementary groups, checks that it cannot get root back, and execs bubblewrap. That is what
   util-linux's prlimit and setpriv did in two execs of two dynamically linked programs, in one exec of a static
   one. Fails closed: a step that fails ends it with exit status 127 before the program is exec'd, and bubblewrap
   never reports a child, so the worker reports the launch, not the program, as failed.
   Built by workers/sandbox/launcher.py. Usage: launcher UID GID [RESOURCE=SOFT:HARD ...] -- PROGRAM [ARG ...] */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const struct { const char *name; int resource; } RESOURCES[] = {
    {"cpu", RLIMIT_CPU}, {"fsize", RLIMIT_FSIZE}, {"nofile", RLIMIT_NOFILE}, {"core", RLIMIT_CORE},
    {"as", RLIMIT_AS}, {"data", RLIMIT_DATA}, {"nproc", RLIMIT_NPROC}, {"stack", RLIMIT_STACK},
};

static int fail(const char *what, const char *arg) {
    fprintf(stderr, "farm sandbox launcher: %s%s%s\n", what, arg ? ": " : "", arg ? arg : "");
    return 127;
}

static int number(const char *text, unsigned long long *out) {
    char *end;
    if (*text < '0' || *text > '9') return -1;
    errno = 0;
    *out = strtoull(text, &end, 10);
    return errno || *end ? -1 : 0;
}

int main(int argc, char **argv) {
    unsigned long long uid, gid;
    if (argc < 5 || number(argv[1], &uid) || number(argv[2], &gid) || uid == 0 || gid == 0)
        return fail("usage: launcher UID GID [RESOURCE=SOFT:HARD ...] -- PROGRAM [ARG ...] (uid, gid > 0)", NULL);
    int i = 3;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        char name[16], *eq = strchr(argv[i], '='), *colon = eq ? strchr(eq, ':') : NULL;
        unsigned long long soft, hard;
        if (!eq || !colon || (size_t)(eq - argv[i]) >= sizeof name) return fail("bad limit", argv[i]);
        memcpy(name, argv[i], eq - argv[i]);
        name[eq - argv[i]] = 0;
        *colon = 0;
        int bad = number(eq + 1, &soft) || number(colon + 1, &hard) || soft > hard;
        *colon = ':';
        if (bad) return fail("bad limit", argv[i]);
        int found = -1;
        for (size_t k = 0; k < sizeof RESOURCES / sizeof *RESOURCES; k++)
            if (strcmp(RESOURCES[k].name, name) == 0) found = RESOURCES[k].resource;
        if (found < 0) return fail("unknown limit", argv[i]);
        struct rlimit limit = {soft, hard};
        if (setrlimit(found, &limit) != 0) return fail("setrlimit failed", argv[i]);
    }
    if (i + 1 >= argc) return fail("no program after --", NULL);
    if (setgroups(0, NULL) != 0) return fail("setgroups failed", strerror(errno));
    if (setresgid(gid, gid, gid) != 0) return fail("setresgid failed", strerror(errno));
    if (setresuid(uid, uid, uid) != 0) return fail("setresuid failed", strerror(errno));
    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (getresuid(&r, &e, &s) || r != uid || e != uid || s != uid || getresgid(&rg, &eg, &sg) || rg != gid
        || eg != gid || sg != gid || getgroups(0, NULL) != 0 || setresuid(0, 0, 0) == 0)
        return fail("the uid, gid or groups did not change", NULL);
    execv(argv[i + 1], argv + i + 1);
    return fail("exec failed", strerror(errno));
}
