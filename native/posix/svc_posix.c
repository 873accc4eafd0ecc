/*
 * svc_posix: Linux file system calls that Node.js has no API for, through Node-API: mknod,
 * the l* and f* xattr calls, renameat2, fallocate, utimensat with AT_FDCWD, linkat, and the
 * node's own locks on an open file (open file description locks and flock, never waiting).
 *
 * Every function but hostLock checks its arguments on the JS thread (a wrong type throws a
 * TypeError there), copies them, runs its one system call on the libuv thread pool (napi_create_async_work) and
 * returns a Promise. The Promise resolves with the call's result (undefined, a Buffer, or the
 * list of names) or rejects with an Error carrying `errno` (the positive errno number), `code`
 * (its name: ENOENT, ...), `syscall`, `path` (the path, or the descriptor as a number) and, for
 * the calls of two paths, `dest`; its message is `<syscall> <path>: <strerror>`.
 *
 * Paths and xattr names are JS strings, passed to the kernel as their UTF-8 bytes (a string with
 * a NUL character throws a TypeError). No state, no threads of its own, no library beyond libc.
 * The TypeScript loader is libs/fs/src/server/local/posix-native.ts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <node_api.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 28))
#define HAVE_RENAMEAT2 1
#endif
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
#define HAVE_STRERRORNAME_NP 1
#endif

/* The most a getxattr or listxattr retries when the value or list grew between the size query
   and the read (ERANGE); then it rejects with ERANGE. */
#define XATTR_TRIES 8

/* ---- errno names ------------------------------------------------------------------------- */

/* The names Node.js gives (95 is ENOTSUP there, where glibc says EOPNOTSUPP), for the errors
   these calls document; others from glibc's strerrorname_np when it has it, else E<number>. */
static const struct {
  int no;
  const char *name;
} ERRNO_NAMES[] = {
  { EPERM, "EPERM" },         { ENOENT, "ENOENT" },   { EINTR, "EINTR" },         { EIO, "EIO" },
  { ENXIO, "ENXIO" },         { EBADF, "EBADF" },     { EAGAIN, "EAGAIN" },       { ENOMEM, "ENOMEM" },
  { EACCES, "EACCES" },       { EFAULT, "EFAULT" },   { EBUSY, "EBUSY" },         { EEXIST, "EEXIST" },
  { EXDEV, "EXDEV" },         { ENODEV, "ENODEV" },   { ENOTDIR, "ENOTDIR" },     { EISDIR, "EISDIR" },
  { EINVAL, "EINVAL" },       { ENFILE, "ENFILE" },   { EMFILE, "EMFILE" },       { ETXTBSY, "ETXTBSY" },
  { EFBIG, "EFBIG" },         { ENOSPC, "ENOSPC" },   { ESPIPE, "ESPIPE" },       { EROFS, "EROFS" },
  { EMLINK, "EMLINK" },       { ERANGE, "ERANGE" },   { ENAMETOOLONG, "ENAMETOOLONG" },
  { ENOSYS, "ENOSYS" },       { ENOTEMPTY, "ENOTEMPTY" }, { ELOOP, "ELOOP" }, { ENODATA, "ENODATA" },
  { EOVERFLOW, "EOVERFLOW" }, { ENOTSUP, "ENOTSUP" }, { ESTALE, "ESTALE" },       { EDQUOT, "EDQUOT" },
  { E2BIG, "E2BIG" },
};

static const char *errno_name(int no, char *buf, size_t size) {
  for (size_t i = 0; i < sizeof ERRNO_NAMES / sizeof ERRNO_NAMES[0]; i++) {
    if (ERRNO_NAMES[i].no == no) return ERRNO_NAMES[i].name;
  }
#ifdef HAVE_STRERRORNAME_NP
  const char *name = strerrorname_np(no);
  if (name) return name;
#endif
  snprintf(buf, size, "E%d", no);
  return buf;
}

/* ---- work items -------------------------------------------------------------------------- */

enum {
  OP_MKNOD,
  OP_GETXATTR,
  OP_SETXATTR,
  OP_LISTXATTR,
  OP_REMOVEXATTR,
  OP_RENAMEAT2,
  OP_FALLOCATE,
  OP_UTIMENSAT,
  OP_LINKAT,
};

/* One call: its arguments (copied on the JS thread), then its result (set on the thread pool). */
typedef struct work {
  napi_async_work aw;
  napi_deferred deferred;
  int op;
  const char *call;   /* the system call's name, for the error */
  char *path, *path2;  /* NULL when the call takes a descriptor, or one path */
  char *name;          /* the xattr name */
  int fd;              /* -1 when the call takes a path */
  int flags;
  uint32_t mode;
  uint64_t rdev;
  int64_t off, len;
  struct timespec times[2];
  char *data; /* setxattr: the value; getxattr, listxattr: the result */
  size_t data_len;
  int err; /* the call's errno, 0 when it succeeded */
} work_t;

static void work_free(work_t *w) {
  free(w->path);
  free(w->path2);
  free(w->name);
  free(w->data);
  free(w);
}

/* getxattr (path or fd): the size first, then the value into a buffer of that size; again when
   the value grew in between. */
static void do_getxattr(work_t *w) {
  for (int tries = 0; tries < XATTR_TRIES; tries++) {
    ssize_t n = w->path ? lgetxattr(w->path, w->name, NULL, 0) : fgetxattr(w->fd, w->name, NULL, 0);
    if (n < 0) {
      w->err = errno;
      return;
    }
    if (n == 0) return; /* an empty value */
    char *buf = malloc((size_t) n);
    if (!buf) {
      w->err = ENOMEM;
      return;
    }
    ssize_t got = w->path ? lgetxattr(w->path, w->name, buf, (size_t) n) : fgetxattr(w->fd, w->name, buf, (size_t) n);
    if (got >= 0) {
      w->data = buf;
      w->data_len = (size_t) got;
      return;
    }
    int e = errno;
    free(buf);
    if (e != ERANGE) {
      w->err = e;
      return;
    }
  }
  w->err = ERANGE;
}

/* listxattr (path or fd): like do_getxattr; the result is the names, each NUL-terminated. */
static void do_listxattr(work_t *w) {
  for (int tries = 0; tries < XATTR_TRIES; tries++) {
    ssize_t n = w->path ? llistxattr(w->path, NULL, 0) : flistxattr(w->fd, NULL, 0);
    if (n < 0) {
      w->err = errno;
      return;
    }
    if (n == 0) return; /* no names */
    char *buf = malloc((size_t) n);
    if (!buf) {
      w->err = ENOMEM;
      return;
    }
    ssize_t got = w->path ? llistxattr(w->path, buf, (size_t) n) : flistxattr(w->fd, buf, (size_t) n);
    if (got >= 0) {
      w->data = buf;
      w->data_len = (size_t) got;
      return;
    }
    int e = errno;
    free(buf);
    if (e != ERANGE) {
      w->err = e;
      return;
    }
  }
  w->err = ERANGE;
}

/* The thread pool: the system call, nothing else. */
static void execute(napi_env env, void *data) {
  (void) env;
  work_t *w = data;
  int r = 0;
  switch (w->op) {
    case OP_MKNOD:
      r = mknod(w->path, (mode_t) w->mode, (dev_t) w->rdev);
      break;
    case OP_GETXATTR:
      do_getxattr(w);
      return;
    case OP_SETXATTR:
      r = w->path ? lsetxattr(w->path, w->name, w->data, w->data_len, w->flags) : fsetxattr(w->fd, w->name, w->data, w->data_len, w->flags);
      break;
    case OP_LISTXATTR:
      do_listxattr(w);
      return;
    case OP_REMOVEXATTR:
      r = w->path ? lremovexattr(w->path, w->name) : fremovexattr(w->fd, w->name);
      break;
    case OP_RENAMEAT2:
#ifdef HAVE_RENAMEAT2
      r = renameat2(AT_FDCWD, w->path, AT_FDCWD, w->path2, (unsigned) w->flags);
#else
      r = (int) syscall(SYS_renameat2, AT_FDCWD, w->path, AT_FDCWD, w->path2, (unsigned) w->flags);
#endif
      break;
    case OP_FALLOCATE:
      r = fallocate(w->fd, w->flags, (off_t) w->off, (off_t) w->len);
      break;
    case OP_UTIMENSAT:
      r = utimensat(AT_FDCWD, w->path, w->times, w->flags);
      break;
    case OP_LINKAT:
      r = linkat(AT_FDCWD, w->path, AT_FDCWD, w->path2, w->flags);
      break;
  }
  if (r < 0) w->err = errno;
}

/* ---- results (JS thread) ----------------------------------------------------------------- */

static napi_value str(napi_env env, const char *s) {
  napi_value v;
  napi_create_string_utf8(env, s, NAPI_AUTO_LENGTH, &v);
  return v;
}

static napi_value num(napi_env env, double d) {
  napi_value v;
  napi_create_double(env, d, &v);
  return v;
}

/* The rejection of a failed call: Error {errno, code, syscall, path[, dest]}. */
static napi_value make_error(napi_env env, const work_t *w) {
  char namebuf[16], fdbuf[32], msg[8192];
  const char *code = errno_name(w->err, namebuf, sizeof namebuf);
  const char *what = w->path;
  if (!what) {
    snprintf(fdbuf, sizeof fdbuf, "fd %d", w->fd);
    what = fdbuf;
  }
  if (w->path2) snprintf(msg, sizeof msg, "%s %s -> %s: %s", w->call, what, w->path2, strerror(w->err));
  else snprintf(msg, sizeof msg, "%s %s: %s", w->call, what, strerror(w->err));
  napi_value error;
  napi_create_error(env, str(env, code), str(env, msg), &error);
  napi_set_named_property(env, error, "errno", num(env, w->err));
  napi_set_named_property(env, error, "syscall", str(env, w->call));
  napi_set_named_property(env, error, "path", w->path ? str(env, w->path) : num(env, w->fd));
  if (w->path2) napi_set_named_property(env, error, "dest", str(env, w->path2));
  return error;
}

/* The value of a successful call: a Buffer (getxattr), the names (listxattr), else undefined. */
static napi_value make_result(napi_env env, const work_t *w) {
  napi_value v;
  if (w->op == OP_GETXATTR) {
    void *copy;
    napi_create_buffer_copy(env, w->data_len, w->data_len ? w->data : "", &copy, &v);
    return v;
  }
  if (w->op == OP_LISTXATTR) {
    napi_create_array(env, &v);
    uint32_t i = 0;
    for (size_t at = 0; at < w->data_len;) {
      size_t n = strnlen(w->data + at, w->data_len - at);
      if (n > 0) {
        napi_value name;
        napi_create_string_utf8(env, w->data + at, n, &name);
        napi_set_element(env, v, i++, name);
      }
      at += n + 1;
    }
    return v;
  }
  napi_get_undefined(env, &v);
  return v;
}

static void complete(napi_env env, napi_status status, void *data) {
  work_t *w = data;
  if (status == napi_ok && w->err == 0) {
    napi_resolve_deferred(env, w->deferred, make_result(env, w));
  } else {
    if (status != napi_ok && w->err == 0) w->err = ECANCELED;
    napi_reject_deferred(env, w->deferred, make_error(env, w));
  }
  napi_delete_async_work(env, w->aw);
  work_free(w);
}

/* Rejects the Promise of a call that could not be queued (`w` is freed by the caller). */
static void reject_plain(napi_env env, napi_deferred deferred, const char *msg) {
  napi_value error;
  napi_create_error(env, NULL, str(env, msg), &error);
  napi_reject_deferred(env, deferred, error);
}

/* Queues the call; the Promise of its result. `w` belongs to the call from here: freed in
   complete(), or here when it could not be queued (the Promise rejects, or, without one, an
   Error is thrown). */
static napi_value start(napi_env env, work_t *w) {
  napi_value promise, name;
  napi_create_string_utf8(env, w->call, NAPI_AUTO_LENGTH, &name);
  if (napi_create_promise(env, &w->deferred, &promise) != napi_ok) {
    work_free(w);
    napi_throw_error(env, NULL, "svc_posix: could not create a promise");
    return NULL;
  }
  if (napi_create_async_work(env, NULL, name, execute, complete, w, &w->aw) != napi_ok) {
    reject_plain(env, w->deferred, "svc_posix: could not create the async work");
    work_free(w);
    return promise;
  }
  if (napi_queue_async_work(env, w->aw) != napi_ok) {
    reject_plain(env, w->deferred, "svc_posix: could not queue the async work");
    napi_delete_async_work(env, w->aw);
    work_free(w);
  }
  return promise;
}

/* ---- arguments (JS thread; each returns 0 with a TypeError thrown on a wrong type) --------- */

static void throw_type(napi_env env, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  napi_throw_type_error(env, NULL, buf);
}

static napi_valuetype type_of(napi_env env, napi_value v) {
  napi_valuetype t = napi_undefined;
  napi_typeof(env, v, &t);
  return t;
}

/* A string without NUL characters into a malloc'ed NUL-terminated UTF-8 copy. */
static int get_string(napi_env env, napi_value v, const char *what, char **out) {
  if (type_of(env, v) != napi_string) {
    throw_type(env, "%s must be a string", what);
    return 0;
  }
  size_t len = 0;
  napi_get_value_string_utf8(env, v, NULL, 0, &len);
  char *s = malloc(len + 1);
  if (!s) {
    napi_throw_error(env, "ENOMEM", "svc_posix: out of memory");
    return 0;
  }
  napi_get_value_string_utf8(env, v, s, len + 1, &len);
  if (strlen(s) != len) {
    free(s);
    throw_type(env, "%s must be a string without NUL characters", what);
    return 0;
  }
  *out = s;
  return 1;
}

/* An integer number in [min, max] (max at most 2^53 - 1). */
static int get_int(napi_env env, napi_value v, const char *what, double min, double max, double *out) {
  double d;
  if (type_of(env, v) != napi_number) {
    throw_type(env, "%s must be a number", what);
    return 0;
  }
  napi_get_value_double(env, v, &d);
  if (!(d >= min && d <= max) || d != (double) (int64_t) d) {
    throw_type(env, "%s must be an integer in [%.0f, %.0f]", what, min, max);
    return 0;
  }
  *out = d;
  return 1;
}

static int get_fd(napi_env env, napi_value v, int *out) {
  double d;
  if (!get_int(env, v, "fd", 0, INT_MAX, &d)) return 0;
  *out = (int) d;
  return 1;
}

static int get_flags(napi_env env, napi_value v, int *out) {
  double d;
  if (!get_int(env, v, "flags", 0, INT_MAX, &d)) return 0;
  *out = (int) d;
  return 1;
}

/* A time for utimensat: a bigint of nanoseconds since the epoch, or 'now' / 'omit'. */
static int get_time(napi_env env, napi_value v, const char *what, struct timespec *ts) {
  napi_valuetype t = type_of(env, v);
  if (t == napi_bigint) {
    int64_t ns;
    bool lossless;
    napi_get_value_bigint_int64(env, v, &ns, &lossless);
    if (!lossless) {
      throw_type(env, "%s must fit in 64 bits of nanoseconds", what);
      return 0;
    }
    int64_t sec = ns / 1000000000, nsec = ns % 1000000000;
    if (nsec < 0) { /* before the epoch: tv_nsec stays in [0, 1e9) */
      sec -= 1;
      nsec += 1000000000;
    }
    ts->tv_sec = (time_t) sec;
    ts->tv_nsec = (long) nsec;
    return 1;
  }
  if (t == napi_string) {
    char buf[8];
    size_t len = 0;
    napi_get_value_string_utf8(env, v, buf, sizeof buf, &len);
    if (len == 3 && strcmp(buf, "now") == 0) {
      ts->tv_sec = 0;
      ts->tv_nsec = UTIME_NOW;
      return 1;
    }
    if (len == 4 && strcmp(buf, "omit") == 0) {
      ts->tv_sec = 0;
      ts->tv_nsec = UTIME_OMIT;
      return 1;
    }
  }
  throw_type(env, "%s must be a bigint of nanoseconds, 'now' or 'omit'", what);
  return 0;
}

static void get_args(napi_env env, napi_callback_info info, size_t want, napi_value *argv) {
  size_t argc = want;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  for (size_t i = argc; i < want; i++) napi_get_undefined(env, &argv[i]);
}

/* A new work item for `op`, with no path and no descriptor. */
static work_t *work_new(napi_env env, int op, const char *call) {
  work_t *w = calloc(1, sizeof(work_t));
  if (!w) {
    napi_throw_error(env, "ENOMEM", "svc_posix: out of memory");
    return NULL;
  }
  w->op = op;
  w->call = call;
  w->fd = -1;
  return w;
}

/* Fails the call being set up: frees `w`; the TypeError is thrown already. */
static napi_value bad(work_t *w) {
  work_free(w);
  return NULL;
}

/* ---- the functions ----------------------------------------------------------------------- */

/* mknod(path, mode, rdev): mode with its type bits (S_IFIFO, ...); rdev: the dev_t, a number or bigint. */
static napi_value js_mknod(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  get_args(env, info, 3, argv);
  work_t *w = work_new(env, OP_MKNOD, "mknod");
  if (!w) return NULL;
  double mode;
  if (!get_string(env, argv[0], "path", &w->path) || !get_int(env, argv[1], "mode", 0, UINT32_MAX, &mode)) return bad(w);
  w->mode = (uint32_t) mode;
  if (type_of(env, argv[2]) == napi_bigint) {
    bool lossless;
    napi_get_value_bigint_uint64(env, argv[2], &w->rdev, &lossless);
    if (!lossless) {
      throw_type(env, "rdev must be a 64-bit unsigned integer");
      return bad(w);
    }
  } else {
    double rdev;
    if (!get_int(env, argv[2], "rdev", 0, 9007199254740991.0, &rdev)) return bad(w);
    w->rdev = (uint64_t) rdev;
  }
  return start(env, w);
}

/* The target of an xattr call: a path (l*) or a descriptor (f*). */
static int get_target(napi_env env, napi_value v, work_t *w, int by_fd) {
  return by_fd ? get_fd(env, v, &w->fd) : get_string(env, v, "path", &w->path);
}

static napi_value getxattr_common(napi_env env, napi_callback_info info, int by_fd) {
  napi_value argv[2];
  get_args(env, info, 2, argv);
  work_t *w = work_new(env, OP_GETXATTR, by_fd ? "fgetxattr" : "lgetxattr");
  if (!w) return NULL;
  if (!get_target(env, argv[0], w, by_fd) || !get_string(env, argv[1], "name", &w->name)) return bad(w);
  return start(env, w);
}

static napi_value setxattr_common(napi_env env, napi_callback_info info, int by_fd) {
  napi_value argv[4];
  get_args(env, info, 4, argv);
  work_t *w = work_new(env, OP_SETXATTR, by_fd ? "fsetxattr" : "lsetxattr");
  if (!w) return NULL;
  if (!get_target(env, argv[0], w, by_fd) || !get_string(env, argv[1], "name", &w->name)) return bad(w);
  bool isbuf = false;
  napi_is_buffer(env, argv[2], &isbuf);
  if (!isbuf) {
    throw_type(env, "value must be a Buffer");
    return bad(w);
  }
  void *value;
  size_t len;
  napi_get_buffer_info(env, argv[2], &value, &len);
  w->data = malloc(len ? len : 1);
  if (!w->data) {
    napi_throw_error(env, "ENOMEM", "svc_posix: out of memory");
    return bad(w);
  }
  if (len) memcpy(w->data, value, len);
  w->data_len = len;
  if (!get_flags(env, argv[3], &w->flags)) return bad(w);
  return start(env, w);
}

static napi_value listxattr_common(napi_env env, napi_callback_info info, int by_fd) {
  napi_value argv[1];
  get_args(env, info, 1, argv);
  work_t *w = work_new(env, OP_LISTXATTR, by_fd ? "flistxattr" : "llistxattr");
  if (!w) return NULL;
  if (!get_target(env, argv[0], w, by_fd)) return bad(w);
  return start(env, w);
}

static napi_value removexattr_common(napi_env env, napi_callback_info info, int by_fd) {
  napi_value argv[2];
  get_args(env, info, 2, argv);
  work_t *w = work_new(env, OP_REMOVEXATTR, by_fd ? "fremovexattr" : "lremovexattr");
  if (!w) return NULL;
  if (!get_target(env, argv[0], w, by_fd) || !get_string(env, argv[1], "name", &w->name)) return bad(w);
  return start(env, w);
}

/* lgetxattr(path, name) / fgetxattr(fd, name): the value, a Buffer. */
static napi_value js_lgetxattr(napi_env env, napi_callback_info info) {
  return getxattr_common(env, info, 0);
}
static napi_value js_fgetxattr(napi_env env, napi_callback_info info) {
  return getxattr_common(env, info, 1);
}

/* lsetxattr(path, name, value, flags) / fsetxattr(fd, ...): flags 0, XATTR_CREATE or XATTR_REPLACE. */
static napi_value js_lsetxattr(napi_env env, napi_callback_info info) {
  return setxattr_common(env, info, 0);
}
static napi_value js_fsetxattr(napi_env env, napi_callback_info info) {
  return setxattr_common(env, info, 1);
}

/* llistxattr(path) / flistxattr(fd): the names, string[]. */
static napi_value js_llistxattr(napi_env env, napi_callback_info info) {
  return listxattr_common(env, info, 0);
}
static napi_value js_flistxattr(napi_env env, napi_callback_info info) {
  return listxattr_common(env, info, 1);
}

/* lremovexattr(path, name) / fremovexattr(fd, name). */
static napi_value js_lremovexattr(napi_env env, napi_callback_info info) {
  return removexattr_common(env, info, 0);
}
static napi_value js_fremovexattr(napi_env env, napi_callback_info info) {
  return removexattr_common(env, info, 1);
}

/* Calls of two paths and flags: renameat2, linkat. */
static napi_value two_paths(napi_env env, napi_callback_info info, int op, const char *call) {
  napi_value argv[3];
  get_args(env, info, 3, argv);
  work_t *w = work_new(env, op, call);
  if (!w) return NULL;
  if (!get_string(env, argv[0], "oldPath", &w->path) || !get_string(env, argv[1], "newPath", &w->path2) || !get_flags(env, argv[2], &w->flags)) return bad(w);
  return start(env, w);
}

/* renameat2(oldPath, newPath, flags): flags 0, RENAME_NOREPLACE or RENAME_EXCHANGE. */
static napi_value js_renameat2(napi_env env, napi_callback_info info) {
  return two_paths(env, info, OP_RENAMEAT2, "renameat2");
}

/* linkat(oldPath, newPath, flags): flags 0 (a link to a symlink itself) or AT_SYMLINK_FOLLOW. */
static napi_value js_linkat(napi_env env, napi_callback_info info) {
  return two_paths(env, info, OP_LINKAT, "linkat");
}

/* fallocate(fd, mode, offset, length): mode 0 or FALLOC_FL_* bits; offset and length in bytes. */
static napi_value js_fallocate(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  get_args(env, info, 4, argv);
  work_t *w = work_new(env, OP_FALLOCATE, "fallocate");
  if (!w) return NULL;
  double mode, off, len;
  if (!get_fd(env, argv[0], &w->fd) || !get_int(env, argv[1], "mode", 0, INT_MAX, &mode) || !get_int(env, argv[2], "offset", 0, 9007199254740991.0, &off) ||
      !get_int(env, argv[3], "length", 0, 9007199254740991.0, &len)) {
    return bad(w);
  }
  w->flags = (int) mode;
  w->off = (int64_t) off;
  w->len = (int64_t) len;
  return start(env, w);
}

/* utimensat(path, atimeNs, mtimeNs, flags): times as bigint ns since the epoch, 'now' or 'omit';
   flags 0 or AT_SYMLINK_NOFOLLOW. */
static napi_value js_utimensat(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  get_args(env, info, 4, argv);
  work_t *w = work_new(env, OP_UTIMENSAT, "utimensat");
  if (!w) return NULL;
  if (!get_string(env, argv[0], "path", &w->path) || !get_time(env, argv[1], "atimeNs", &w->times[0]) || !get_time(env, argv[2], "mtimeNs", &w->times[1]) ||
      !get_flags(env, argv[3], &w->flags)) {
    return bad(w);
  }
  return start(env, w);
}

/* hostLock(fd, kind, type, start, len): a lock of the process's own on open file `fd`, never
   waiting. kind 0: an open file description lock (fcntl F_OFD_SETLK) of type 0 (unlock), 1
   (read) or 2 (write) over [start, start + len) bytes (len 0: to the end of the file); kind 1:
   flock(2) LOCK_UN, LOCK_SH or LOCK_EX with LOCK_NB (start and len unused). Runs on the JS
   thread, as neither call waits: a conflicting lock held elsewhere answers EAGAIN at once.
   Returns 0, or the errno (a number); a wrong argument throws a TypeError. */
static napi_value js_host_lock(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  get_args(env, info, 5, argv);
  int fd;
  double kind, type, off, len;
  if (!get_fd(env, argv[0], &fd) || !get_int(env, argv[1], "kind", 0, 1, &kind) || !get_int(env, argv[2], "type", 0, 2, &type) ||
      !get_int(env, argv[3], "start", 0, 9007199254740991.0, &off) || !get_int(env, argv[4], "len", 0, 9007199254740991.0, &len)) {
    return NULL;
  }
  int rc;
  if (kind == 0) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type == 0 ? F_UNLCK : type == 1 ? F_RDLCK : F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = (off_t) off;
    fl.l_len = (off_t) len;
    rc = fcntl(fd, F_OFD_SETLK, &fl);
  } else {
    rc = flock(fd, (type == 0 ? LOCK_UN : type == 1 ? LOCK_SH : LOCK_EX) | LOCK_NB);
  }
  return num(env, rc == 0 ? 0 : errno);
}

/* ---- module ------------------------------------------------------------------------------ */

static void export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn);
  napi_set_named_property(env, exports, name, fn);
}

static napi_value init_module(napi_env env, napi_value exports) {
  export_fn(env, exports, "mknod", js_mknod);
  export_fn(env, exports, "lgetxattr", js_lgetxattr);
  export_fn(env, exports, "lsetxattr", js_lsetxattr);
  export_fn(env, exports, "llistxattr", js_llistxattr);
  export_fn(env, exports, "lremovexattr", js_lremovexattr);
  export_fn(env, exports, "fgetxattr", js_fgetxattr);
  export_fn(env, exports, "fsetxattr", js_fsetxattr);
  export_fn(env, exports, "flistxattr", js_flistxattr);
  export_fn(env, exports, "fremovexattr", js_fremovexattr);
  export_fn(env, exports, "renameat2", js_renameat2);
  export_fn(env, exports, "fallocate", js_fallocate);
  export_fn(env, exports, "utimensat", js_utimensat);
  export_fn(env, exports, "linkat", js_linkat);
  export_fn(env, exports, "hostLock", js_host_lock);

  napi_value constants;
  napi_create_object(env, &constants);
#define CONST(n) napi_set_named_property(env, constants, #n, num(env, n));
  CONST(S_IFIFO) CONST(S_IFSOCK) CONST(S_IFCHR) CONST(S_IFBLK) CONST(S_IFREG)
  CONST(XATTR_CREATE) CONST(XATTR_REPLACE) CONST(RENAME_NOREPLACE) CONST(RENAME_EXCHANGE)
  CONST(AT_SYMLINK_NOFOLLOW) CONST(AT_SYMLINK_FOLLOW) CONST(FALLOC_FL_KEEP_SIZE) CONST(FALLOC_FL_PUNCH_HOLE)
#undef CONST
  napi_object_freeze(env, constants);
  napi_set_named_property(env, exports, "constants", constants);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init_module)
