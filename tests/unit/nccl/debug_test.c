/*
 * NCCL_DEBUG and NCCL_DEBUG_FILE: the level filters what is written, the
 * file name's %h and %p become the host name and the process id, and
 * ncclResetDebugInit reads both variables again.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

/* The test exercises the deprecated reload on purpose. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static char dir[] = "/tmp/hz-nccl-debug-XXXXXX";

/* The whole file (empty if absent) into buf; 0 if it does not exist. */
static int ReadFile(const char* path, char* buf, size_t size) {
  FILE* f = fopen(path, "r");
  size_t n;
  buf[0] = '\0';
  if (f == NULL) return 0;
  n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
  return 1;
}

static void Reload(const char* level, const char* file) {
  if (level)
    setenv("NCCL_DEBUG", level, 1);
  else
    unsetenv("NCCL_DEBUG");
  setenv("NCCL_DEBUG_FILE", file, 1);
  ncclResetDebugInit();
}

int main(void) {
  char host[256] = {0}, pattern[512], path[512], text[8192];
  char* dot;
  EXPECT(mkdtemp(dir) != NULL);
  gethostname(host, sizeof(host) - 1);
  if ((dot = strchr(host, '.')) != NULL) *dot = '\0';

  /* WARN: errors are written, to a file named after host and pid. */
  snprintf(pattern, sizeof(pattern), "%s/nccl.%%h.%%p.log", dir);
  Reload("WARN", pattern);
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument);
  snprintf(path, sizeof(path), "%s/nccl.%s.%d.log", dir, host, (int)getpid());
  EXPECT(ReadFile(path, text, sizeof(text)));
  EXPECT(strstr(text, "NCCL WARN ncclGetVersion: version is NULL") != NULL);
  EXPECT(strstr(text, host) != NULL);
  unlink(path);

  /* VERSION: errors are not. "%%" is a literal percent sign. */
  snprintf(pattern, sizeof(pattern), "%s/version%%%%.log", dir);
  Reload("VERSION", pattern);
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument);
  snprintf(path, sizeof(path), "%s/version%%.log", dir);
  EXPECT(ReadFile(path, text, sizeof(text)));
  EXPECT(strstr(text, "WARN") == NULL);
  unlink(path);

  /* INFO includes WARN. */
  snprintf(pattern, sizeof(pattern), "%s/info.log", dir);
  Reload("info", pattern);
  EXPECT(ncclCommCount(NULL, NULL) == ncclInvalidArgument);
  snprintf(path, sizeof(path), "%s/info.log", dir);
  EXPECT(ReadFile(path, text, sizeof(text)));
  EXPECT(strstr(text, "NCCL WARN ncclCommCount") != NULL);
  unlink(path);

  /* Unset: nothing is written, and no file is made. */
  snprintf(pattern, sizeof(pattern), "%s/none.log", dir);
  Reload(NULL, pattern);
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument);
  snprintf(path, sizeof(path), "%s/none.log", dir);
  EXPECT(!ReadFile(path, text, sizeof(text)));

  EXPECT(rmdir(dir) == 0);
  puts("ok");
  return 0;
}
