/*
 * image.c - will the program about to be exec'd run sovia? Its carried
 * connections can only go along if the new image loads the preload and
 * reads its sockets through libc. When it will not (a set-user-ID, set-
 * group-ID or file-capability program, for which the loader ignores
 * LD_PRELOAD; a static program, which has no loader; an ELF of another
 * class or machine; a Go program, whose runtime makes its own system
 * calls), the connections go back to their kernel sockets first
 * (migrate.c), so the new program finds its streams where it looks.
 * A script is judged by its interpreter.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "preload.h"

#define SCRIPT_DEPTH 2

static bool read_at(int fd, void *buf, size_t len, off_t off)
{
    return pread(fd, buf, len, off) == (ssize_t)len;
}

/* A Go program carries a section of this name (Go 1.18 on). */
static bool has_go_section(int fd, const Elf64_Ehdr *eh)
{
    if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0 || eh->e_shnum > 4096 ||
        eh->e_shstrndx >= eh->e_shnum)
        return false;
    Elf64_Shdr strs;
    if (!read_at(fd, &strs, sizeof(strs), (off_t)(eh->e_shoff + eh->e_shstrndx * sizeof(strs))))
        return false;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        Elf64_Shdr sh;
        char name[16];
        if (!read_at(fd, &sh, sizeof(sh), (off_t)(eh->e_shoff + i * sizeof(sh))) ||
            sh.sh_name >= strs.sh_size)
            continue;
        ssize_t n = pread(fd, name, sizeof(name) - 1, (off_t)(strs.sh_offset + sh.sh_name));
        if (n <= 0)
            continue;
        name[n] = 0;
        if (strcmp(name, ".go.buildinfo") == 0)
            return true;
    }
    return false;
}

/* A dynamic ELF of our class and machine, not Go's. */
static bool elf_runs_sovia(int fd)
{
    Elf64_Ehdr eh;
    if (!read_at(fd, &eh, sizeof(eh), 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
        return false;
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 4096)
        return false;
    bool interp = false;
    for (unsigned i = 0; i < eh.e_phnum && !interp; i++) {
        Elf64_Phdr ph;
        if (!read_at(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))))
            return false;
        interp = ph.p_type == PT_INTERP;
    }
    return interp && !has_go_section(fd, &eh);
}

/* The loader ignores LD_PRELOAD (secure-execution mode) for these. */
static bool secure_exec(int fd, const struct stat *st)
{
    if ((st->st_mode & S_ISUID) && st->st_uid != geteuid())
        return true;
    if ((st->st_mode & S_ISGID) && st->st_gid != getegid())
        return true;
    return fgetxattr(fd, "security.capability", NULL, 0) > 0;
}

static bool runs_sovia(int fd, int depth)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || secure_exec(fd, &st))
        return false;
    char head[256];
    ssize_t n = pread(fd, head, sizeof(head) - 1, 0);
    if (n >= 2 && head[0] == '#' && head[1] == '!') {
        if (depth >= SCRIPT_DEPTH)
            return false;
        head[n] = 0;
        char *p = head + 2;
        while (*p == ' ' || *p == '\t')
            p++;
        char *end = p + strcspn(p, " \t\n");
        *end = 0;
        int ifd = *p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
        if (ifd < 0)
            return true; /* the exec fails anyway; nothing to decide */
        bool r = runs_sovia(ifd, depth + 1);
        close(ifd);
        return r;
    }
    return elf_runs_sovia(fd);
}

bool preload_image_runs_sovia(const char *path, int fd)
{
    int own = -1;
    if (fd < 0) {
        own = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        if (own < 0)
            return true; /* not readable: the exec itself will say (or it runs elsewhere) */
        fd = own;
    }
    bool r = runs_sovia(fd, 0);
    if (own >= 0)
        close(own);
    return r;
}

/* execvp's search, to judge the program it would run. NULL if not found. */
char *preload_image_search(const char *file)
{
    if (!file || !*file)
        return NULL;
    if (strchr(file, '/'))
        return strdup(file);
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin";
    size_t flen = strlen(file);
    for (const char *p = path;; p++) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
        char *full = malloc(dlen + flen + 2);
        if (!full)
            return NULL;
        memcpy(full, dlen ? p : ".", dlen ? dlen : 1);
        size_t at = dlen ? dlen : 1;
        full[at] = '/';
        memcpy(full + at + 1, file, flen + 1);
        if (access(full, X_OK) == 0)
            return full;
        free(full);
        if (!colon)
            return NULL;
        p = colon;
    }
}
