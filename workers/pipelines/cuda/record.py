"""The completion record: proof that the harness's `main` returned, written by a trusted wrapper.

With a harness, the farm links `WRAPPER_SOURCE` into the program with `--wrap=main`: the C runtime
calls the wrapper's `__wrap_main`, which calls the harness's `main` (`__real_main`), then checks that
stdout still goes where it went at start-up, and prints `RECORD_TAG <nonce> <status>` as the last line.
A program that ends any other way (exit(0) in the kernel, a signal, a raw exit syscall) has no record,
and a response cannot forge one: the nonce is fresh per run, given in the environment, moved by a
constructor that runs before any other (priority 101) into a page kept PROT_NONE until the record is
written, and wiped from the environment block; the response's object may not call getenv, mprotect or
syscall, nor have constructors (`checks`). After the record the wrapper `_exit`s: no destructor
or atexit handler of the response runs after it.
"""

from __future__ import annotations

import re
import secrets

NONCE_VARIABLE = "FARM_CUDA_NONCE"
RECORD_TAG = "FARM_HARNESS_RETURNED"
WRAPPER_FILE = "farm_main.cpp"

WRAPPER_SOURCE = r"""// The farm's entry point for a harness (linked with --wrap=main): workers/pipelines/cuda/record.py
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;
extern "C" int __real_main(int, char **, char **);

namespace {
const char kVariable[] = "%(variable)s=";
char *nonce_page = nullptr;  // PROT_NONE from the constructor until the record is printed
size_t nonce_length = 0;
FILE *stdout_at_start = nullptr;
struct stat fd1_at_start;
bool fd1_known = false;
bool entered = false;

[[noreturn]] void refuse(const char *why) {
  fflush(stdout);
  fprintf(stderr, "farm: %%s\n", why);
  _exit(125);
}

__attribute__((constructor(101))) void take_nonce() {
  stdout_at_start = stdout;
  fd1_known = fstat(1, &fd1_at_start) == 0;
  for (char **entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    if (strncmp(*entry, kVariable, sizeof kVariable - 1) != 0) continue;
    char *value = *entry + sizeof kVariable - 1;
    size_t length = strlen(value);
    if (nonce_page == nullptr && length > 0 && length < 256) {
      void *page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (page != MAP_FAILED) {
        memcpy(page, value, length);
        nonce_length = length;
        nonce_page = static_cast<char *>(page);
        mprotect(page, 4096, PROT_NONE);
      }
    }
    memset(value, 0, length);  // the environment block on the stack: wipe it, not only unset it
  }
  unsetenv("%(variable)s");
}
}  // namespace

extern "C" int __wrap_main(int argc, char **argv, char **envp) {
  if (entered) refuse("main was entered twice");
  entered = true;
  std::streambuf *cout_buffer = std::cout.rdbuf();
  int status = __real_main(argc, argv, envp);
  std::cout.flush();
  if (fflush(stdout) != 0 || ferror(stdout)) refuse("the harness's standard output could not be written");
  if (stdout != stdout_at_start || fileno(stdout) != 1) refuse("stdout was replaced while the harness ran");
  struct stat fd1_now;
  if (!fd1_known || fstat(1, &fd1_now) != 0 || fd1_now.st_dev != fd1_at_start.st_dev ||
      fd1_now.st_ino != fd1_at_start.st_ino)
    refuse("file descriptor 1 was redirected while the harness ran");
  if (std::cout.rdbuf() != cout_buffer || !std::cout.good()) refuse("std::cout was redirected or silenced");
  if (nonce_page == nullptr) refuse("no %(variable)s in the environment: no completion record can be written");
  mprotect(nonce_page, 4096, PROT_READ);
  printf("\n%(tag)s %%.*s %%d\n", static_cast<int>(nonce_length), nonce_page, status);
  if (fflush(stdout) != 0) refuse("the completion record could not be written");
  _exit(status);
}
""" % {"variable": NONCE_VARIABLE, "tag": RECORD_TAG}


def new_nonce() -> str:
    return secrets.token_hex(16)


def split_record(stdout: str, nonce: str) -> tuple[str, int] | None:
    """(the harness's output, its main's status) when stdout ends with this run's record, else None."""
    body, _, last = stdout.rstrip("\n").rpartition("\n")
    match = re.fullmatch(rf"{RECORD_TAG} {re.escape(nonce)} (-?\d+)", last)
    return (body, int(match.group(1))) if match else None
