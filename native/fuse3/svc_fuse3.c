/*
 * svc_fuse3: libfuse 3's low-level (inode-based) API for Node.js, through Node-API.
 *
 * The addon owns the FUSE session and nothing else: no caches, no paths, no protocol. The
 * TypeScript wrapper (libs/fuse3) gives it a dispatch function and answers every request.
 *
 * Threads of one session:
 *  - the loop thread mounts (fuse_session_mount), reads requests from /dev/fuse and runs
 *    libfuse's dispatch. Every handler copies what the request carries (names, data), takes a
 *    slot for the request, queues a message to the JS thread (napi_threadsafe_function with an
 *    unbounded queue, so queueing never blocks) and returns; it never waits for JS.
 *  - the JS thread (the event loop) gets each message in call_js, calls the dispatch function
 *    and later answers with one of the reply functions, which call fuse_reply_* there (libfuse
 *    allows replies from any thread; a reply is one write(2) to /dev/fuse, which does not wait
 *    for other requests).
 *  - the notify thread runs the kernel notifications (inval_inode, inval_entry, delete) and the
 *    unmount one at a time from a queue, each resolved by a message back to JS. A notification
 *    can wait inside the kernel for locks held by requests in progress, or for write-back,
 *    which need the loop thread and JS to go on answering: on the JS thread it could deadlock.
 *
 * Read-only opens of the inodes JS lists (fastOpen) are answered on the loop thread, with the
 * file handle FAST_FH and the kernel's cache kept; their flush and release too, except on the
 * inodes on which JS holds locks taken through such opens (fastLocks). JS decides which inodes
 * (those whose content it knows to be current) and takes each off before it acts on a change of
 * it; reads and lock requests through FAST_FH go to JS like any other. The same way, the
 * kernel's getxattr of security.capability (asked before a write that may have to drop it) is
 * answered ENODATA on the loop thread for the inodes JS lists as having none (noCaps).
 *
 * A request is a slot (index and generation, one number for JS): replying takes the slot under
 * the session lock, so a request is answered once; a second reply, or one after the session
 * ended, returns false and sends nothing.
 *
 * End of a session (asked for, or the kernel closed the connection): the loop thread answers
 * every request still waiting for JS with ENOTCONN, stops the notify thread while it goes on
 * answering new requests with ENOTCONN at once (so that a notification waiting for one of them
 * returns), waits for a reply being written on the JS thread, then closes the connection and
 * unmounts lazily if still mounted (fuse_session_unmount), and tells JS, which joins the thread
 * and destroys the session.
 */
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <node_api.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- operation codes, shared with libs/fuse3/src/binding.ts (checked there at load) ------- */

enum {
  OP_LOOKUP, OP_FORGET, OP_GETATTR, OP_SETATTR, OP_READLINK, OP_MKNOD, OP_MKDIR, OP_UNLINK,
  OP_RMDIR, OP_SYMLINK, OP_RENAME, OP_LINK, OP_OPEN, OP_READ, OP_WRITE, OP_FLUSH, OP_RELEASE,
  OP_FSYNC, OP_OPENDIR, OP_READDIR, OP_READDIRPLUS, OP_RELEASEDIR, OP_FSYNCDIR, OP_STATFS,
  OP_SETXATTR, OP_GETXATTR, OP_LISTXATTR, OP_REMOVEXATTR, OP_ACCESS, OP_CREATE, OP_GETLK,
  OP_SETLK, OP_FLOCK, OP_FALLOCATE, OP_LSEEK, OP_COPY_FILE_RANGE, OP_COUNT
};

static const char *const OP_NAMES[OP_COUNT] = {
  "lookup", "forget", "getattr", "setattr", "readlink", "mknod", "mkdir", "unlink",
  "rmdir", "symlink", "rename", "link", "open", "read", "write", "flush", "release",
  "fsync", "opendir", "readdir", "readdirplus", "releasedir", "fsyncdir", "statfs",
  "setxattr", "getxattr", "listxattr", "removexattr", "access", "create", "getlk",
  "setlk", "flock", "fallocate", "lseek", "copy_file_range",
};

/* Message kinds: the first argument of the dispatch function. */
enum { MSG_REQUEST, MSG_INTERRUPT, MSG_INIT, MSG_NOTIFY_DONE, MSG_END, MSG_FORGET };

/* Notification jobs. */
enum { JOB_INVAL_INODE, JOB_INVAL_ENTRY, JOB_DELETE, JOB_EXPIRE_ENTRY, JOB_UNMOUNT };

enum { ST_RUNNING, ST_ENDING, ST_ENDED };

#define SLOT_BITS 21
#define SLOT_MAX (1u << SLOT_BITS)
#define SLOT_NONE UINT32_MAX
#define DISPATCH_ARGS 15

/* ---- the last message libfuse logged on this thread (for errors thrown to JS) ------------- */

static __thread char tl_last_log[512];
static __thread int tl_log_open; /* the last fragment did not end the line: the next continues it */

static void log_func(enum fuse_log_level level, const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  size_t at = tl_log_open ? strlen(tl_last_log) : 0;
  vsnprintf(tl_last_log + at, sizeof tl_last_log - at, fmt, copy);
  va_end(copy);
  size_t n = strlen(tl_last_log);
  tl_log_open = n == 0 || tl_last_log[n - 1] != '\n';
  while (n > 0 && tl_last_log[n - 1] == '\n') tl_last_log[--n] = '\0';
  vfprintf(stderr, fmt, ap);
}

/* ---- structures -------------------------------------------------------------------------- */

typedef struct slot {
  fuse_req_t req; /* NULL: free, or answered */
  uint32_t gen;
  uint32_t next_free;
  uint32_t size; /* read, readdir(plus), getxattr, listxattr: the size asked for */
  uint8_t op;
} slot_t;

typedef struct job {
  struct job *next;
  int kind;
  uint32_t id;
  uint64_t ino, child;
  int64_t off, len;
  size_t name_len;
  char name[];
} job_t;

typedef struct conn_cfg {
  uint32_t want, unwant;
  uint32_t max_write, max_read, max_readahead, max_background, congestion_threshold, time_gran;
  uint32_t spin_us; /* how long the loop thread reads on before it sleeps, µs (0: it sleeps at once) */
  int has_max_read, has_max_readahead, has_max_background, has_congestion_threshold, has_time_gran;
} conn_cfg_t;

/* A bit per inode number, grown on demand. */
typedef struct {
  uint8_t *b;
  size_t n; /* bytes */
} bits_t;

typedef struct sess {
  pthread_mutex_t lock;
  pthread_cond_t cond; /* the notify thread waits on it */
  struct fuse_session *se;
  char *mountpoint;
  conn_cfg_t cfg;
  napi_env env;
  napi_threadsafe_function tsfn;
  napi_ref self_ref;
  pthread_t loop_thread, worker_thread;
  int loop_started, worker_started, loop_joined;
  int wake_fd; /* eventfd: stop the loop */
  int done_fd; /* eventfd: the notify thread has ended */
  int state;   /* ST_*, under lock */
  int stop;    /* atomic: the loop thread is asked to stop */
  int mounted, unmount_requested, unmount_queued, worker_quit;
  int hook_added, finished;
  int replying; /* requests taken from their slot and not answered yet (under lock) */
  slot_t *slots;
  uint32_t nslots, free_head, live;
  job_t *jobs, *jobs_tail;
  uint32_t next_job;
  /* Inodes whose read-only opens are answered here, and inodes on which JS holds locks taken
     through such opens (their flush and release go to JS): a bit per inode number (under lock). */
  bits_t fast, locked;
  uint64_t fast_opens, fast_releases; /* under lock */
  /* Inodes JS knows to have no security.capability: the kernel's getxattr of it (before every
     write that may have to drop it) is answered ENODATA here (under lock). */
  bits_t nocaps;
  /* Directory attributes JS set after answering a change of the directory's entries (fastAttr):
     the kernel's getattr that follows its own invalidation of them is answered here, once,
     within FAST_ATTR_NS (under lock; null until the first). */
  struct fast_attr *fattrs;
  uint32_t nfattrs;      /* entries set (under lock) */
  uint64_t fast_getattrs; /* getattrs answered here so far (under lock) */
} sess_t;

/* One set of directory attributes answered here (ino 0: none). */
typedef struct fast_attr {
  uint64_t ino;
  struct stat st;
  double timeout;
  struct timespec until; /* CLOCK_MONOTONIC */
} fast_attr_t;

/* Entries of the directory attributes table (direct-mapped by inode number). */
#define FAST_ATTRS 256
/* How long a set of directory attributes may be answered here after JS set it, ns. */
#define FAST_ATTR_NS 1000000000LL

/* The file handle of the opens answered here (above every handle JS gives out, below 2^53). */
#define FAST_FH ((uint64_t) 1 << 32)
/* The largest inode number fastOpen takes (a bit per inode: 16 MiB of bits at most). */
#define FAST_MAX_INO ((uint64_t) 1 << 27)

typedef struct msg {
  int kind, op;
  uint64_t id;
  uint32_t uid, gid, pid, umask;
  uint64_t ino, ino2, fh, fh2, owner;
  int64_t off, off2, len;
  uint32_t u1, u2, u3;
  int has_fh;
  struct stat st;
  struct flock lk;
  char *name, *name2;
  size_t name_len, name2_len;
  void *data;
  size_t data_len;
  uint64_t *forgets; /* ino, nlookup pairs */
  size_t nforgets;
  struct fuse_conn_info conn;
  int rc;
  const char *text;
  char extra[];
} msg_t;

/* ---- inodes opened here (under s->lock) ------------------------------------------------- */

static int bits_has(const bits_t *bits, uint64_t ino) {
  size_t byte = (size_t) (ino >> 3);
  return byte < bits->n && (bits->b[byte] >> (ino & 7)) & 1;
}

/* Sets or clears the bit of `ino`; 0 when it could not be set (no memory, too large). */
static int bits_set(bits_t *bits, uint64_t ino, int on) {
  size_t byte = (size_t) (ino >> 3);
  if (byte >= bits->n) {
    if (!on) return 1;
    if (ino > FAST_MAX_INO) return 0;
    size_t n = bits->n ? bits->n : 4096;
    while (n <= byte) n *= 2;
    uint8_t *b = realloc(bits->b, n);
    if (!b) return 0;
    memset(b + bits->n, 0, n - bits->n);
    bits->b = b;
    bits->n = n;
  }
  if (on) bits->b[byte] |= (uint8_t) (1u << (ino & 7));
  else bits->b[byte] &= (uint8_t) ~(1u << (ino & 7));
  return 1;
}

/* True when a flush or release of FAST_FH on `ino` is answered here (JS holds no lock taken through it). */
static int fast_close_here(fuse_req_t req, fuse_ino_t ino) {
  sess_t *s = fuse_req_userdata(req);
  pthread_mutex_lock(&s->lock);
  int here = !bits_has(&s->locked, ino);
  pthread_mutex_unlock(&s->lock);
  return here;
}

/* Drops the directory attributes of `ino` kept here, if any (under s->lock). */
static void fast_attr_drop_locked(sess_t *s, uint64_t ino) {
  if (s->nfattrs == 0 || ino == 0) return;
  fast_attr_t *a = &s->fattrs[ino % FAST_ATTRS];
  if (a->ino != ino) return;
  a->ino = 0;
  s->nfattrs--;
}

/* Drops the directory attributes of `ino` and `ino2` kept here: a request about them (as the
   inode or a parent) went to JS, which sets them again after it when it knows them. */
static void fast_attr_drop(sess_t *s, uint64_t ino, uint64_t ino2) {
  pthread_mutex_lock(&s->lock);
  fast_attr_drop_locked(s, ino);
  fast_attr_drop_locked(s, ino2);
  pthread_mutex_unlock(&s->lock);
}

/* Answers the kernel's getattr of `ino` with the directory attributes JS set, when they are
   there and not older than FAST_ATTR_NS; they are used once. */
static int fast_attr_here(fuse_req_t req, fuse_ino_t ino) {
  sess_t *s = fuse_req_userdata(req);
  struct stat st;
  double timeout = 0;
  int here = 0;
  pthread_mutex_lock(&s->lock);
  if (s->nfattrs > 0 && s->state == ST_RUNNING) {
    fast_attr_t *a = &s->fattrs[ino % FAST_ATTRS];
    if (a->ino == ino) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (now.tv_sec < a->until.tv_sec || (now.tv_sec == a->until.tv_sec && now.tv_nsec < a->until.tv_nsec)) {
        st = a->st;
        timeout = a->timeout;
        here = 1;
        s->fast_getattrs++;
      }
      a->ino = 0;
      s->nfattrs--;
    }
  }
  pthread_mutex_unlock(&s->lock);
  if (here) fuse_reply_attr(req, &st, timeout);
  return here;
}

/* ---- slots (under s->lock) --------------------------------------------------------------- */

static uint64_t slot_alloc(sess_t *s, fuse_req_t req, int op, uint32_t size) {
  if (s->free_head == SLOT_NONE) {
    uint32_t n = s->nslots ? s->nslots * 2 : 256;
    if (n > SLOT_MAX) n = SLOT_MAX;
    if (n <= s->nslots) return 0;
    slot_t *grown = realloc(s->slots, n * sizeof(slot_t));
    if (!grown) return 0;
    for (uint32_t i = s->nslots; i < n; i++) {
      grown[i] = (slot_t){ .req = NULL, .gen = 0, .next_free = i + 1 < n ? i + 1 : SLOT_NONE };
    }
    s->slots = grown;
    s->free_head = s->nslots;
    s->nslots = n;
  }
  uint32_t i = s->free_head;
  slot_t *sl = &s->slots[i];
  s->free_head = sl->next_free;
  sl->gen = (sl->gen + 1) & 0xffffffffu;
  if (sl->gen == 0) sl->gen = 1;
  sl->req = req;
  sl->op = (uint8_t) op;
  sl->size = size;
  s->live++;
  return ((uint64_t) sl->gen << SLOT_BITS) | i;
}

static slot_t *slot_find(sess_t *s, uint64_t id) {
  uint32_t i = (uint32_t) (id & (SLOT_MAX - 1));
  uint32_t gen = (uint32_t) (id >> SLOT_BITS);
  if (i >= s->nslots) return NULL;
  slot_t *sl = &s->slots[i];
  if (sl->gen != gen || sl->req == NULL) return NULL;
  return sl;
}

static void slot_free(sess_t *s, slot_t *sl) {
  sl->req = NULL;
  sl->next_free = s->free_head;
  s->free_head = (uint32_t) (sl - s->slots);
  s->live--;
}

/* Takes the request out of its slot: the caller answers it, then calls reply_done. NULL when
   already answered. The end of the session waits for the requests taken to be answered before
   it closes the connection (a reply must not be written to a closed, maybe reused, descriptor). */
static fuse_req_t slot_take(sess_t *s, uint64_t id, int *op, uint32_t *size) {
  pthread_mutex_lock(&s->lock);
  slot_t *sl = slot_find(s, id);
  fuse_req_t req = NULL;
  if (sl) {
    req = sl->req;
    if (op) *op = sl->op;
    if (size) *size = sl->size;
    slot_free(s, sl);
    s->replying++;
  }
  pthread_mutex_unlock(&s->lock);
  return req;
}

static void reply_done(sess_t *s) {
  pthread_mutex_lock(&s->lock);
  if (--s->replying == 0) pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

/* ---- messages to JS (any thread) --------------------------------------------------------- */

static msg_t *msg_new(size_t extra) {
  return calloc(1, sizeof(msg_t) + extra);
}

static void msg_free(msg_t *m) {
  if (!m) return;
  free(m->data);
  free(m);
}

static int msg_post(sess_t *s, msg_t *m) {
  if (napi_call_threadsafe_function(s->tsfn, m, napi_tsfn_nonblocking) != napi_ok) {
    msg_free(m);
    return -1;
  }
  return 0;
}

static void wake(int fd) {
  uint64_t one = 1;
  ssize_t r = write(fd, &one, sizeof one);
  (void) r;
}

/* ---- request handlers (loop thread) ------------------------------------------------------ */

static __thread uint64_t tl_registering;
static __thread int tl_interrupted_early;

static void post_interrupt(sess_t *s, uint64_t id) {
  msg_t *m = msg_new(0);
  if (!m) return;
  m->kind = MSG_INTERRUPT;
  m->id = id;
  msg_post(s, m);
}

/* libfuse calls it in the loop thread when the kernel interrupts a request (or inline from
   fuse_req_interrupt_func when the interrupt came first). `data` is the request's id, not a
   pointer: the request may be answered (and its slot reused) concurrently. */
static void on_interrupt(fuse_req_t req, void *data) {
  uint64_t id = (uint64_t) (uintptr_t) data;
  if (id == tl_registering) {
    tl_interrupted_early = 1;
    return;
  }
  post_interrupt(fuse_req_userdata(req), id);
}

static int utf8_valid(const char *p, size_t n) {
  const unsigned char *s = (const unsigned char *) p;
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) { k = 1; cp = c & 0x1f; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { k = 2; cp = c & 0x0f; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { k = 3; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (n - i <= k) return 0;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + j] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += k + 1;
  }
  return 1;
}

/* Starts a request for JS: a message with `extra` bytes for names, and a slot. NULL when the
   request was answered here (session ending, no memory). */
static msg_t *req_begin(fuse_req_t req, int op, uint32_t size, size_t extra) {
  sess_t *s = fuse_req_userdata(req);
  msg_t *m = msg_new(extra);
  if (!m) {
    fuse_reply_err(req, ENOMEM);
    return NULL;
  }
  pthread_mutex_lock(&s->lock);
  if (s->state != ST_RUNNING) {
    pthread_mutex_unlock(&s->lock);
    free(m);
    fuse_reply_err(req, ENOTCONN);
    return NULL;
  }
  uint64_t id = slot_alloc(s, req, op, size);
  pthread_mutex_unlock(&s->lock);
  if (id == 0) {
    free(m);
    fuse_reply_err(req, ENOMEM);
    return NULL;
  }
  const struct fuse_ctx *ctx = fuse_req_ctx(req);
  m->kind = MSG_REQUEST;
  m->op = op;
  m->id = id;
  m->uid = ctx->uid;
  m->gid = ctx->gid;
  m->pid = (uint32_t) ctx->pid;
  m->umask = ctx->umask;
  return m;
}

/* Hands the request to JS. Nothing may touch `req` after this: JS may answer it at once. */
static void req_post(fuse_req_t req, msg_t *m) {
  sess_t *s = fuse_req_userdata(req);
  uint64_t id = m->id;
  fast_attr_drop(s, m->ino, m->ino2);
  tl_registering = id;
  tl_interrupted_early = 0;
  fuse_req_interrupt_func(req, on_interrupt, (void *) (uintptr_t) id);
  tl_registering = 0;
  int early = tl_interrupted_early;
  if (msg_post(s, m) != 0) {
    fuse_req_t r = slot_take(s, id, NULL, NULL);
    if (r) {
      fuse_reply_err(r, EIO);
      reply_done(s);
    }
    return;
  }
  if (early) post_interrupt(s, id);
}

/* Copies a name (n bytes) into the message's extra bytes at *at, NUL-terminated. */
static char *put_name(msg_t *m, size_t *at, const char *name, size_t n) {
  char *dst = m->extra + *at;
  memcpy(dst, name, n);
  dst[n] = '\0';
  *at += n + 1;
  return dst;
}

/* Answers EINVAL for a name that cannot reach JS as a string (not UTF-8). */
static int name_ok(fuse_req_t req, const char *name) {
  if (utf8_valid(name, strlen(name))) return 1;
  fuse_reply_err(req, EINVAL);
  return 0;
}

#define NAMED_REQUEST(OPC, PARENT, NAME)                      \
  if (!name_ok(req, NAME)) return;                            \
  size_t n_ = strlen(NAME), at_ = 0;                          \
  msg_t *m = req_begin(req, OPC, 0, n_ + 1);                  \
  if (!m) return;                                             \
  m->ino = PARENT;                                            \
  m->name = put_name(m, &at_, NAME, n_);                      \
  m->name_len = n_;

static void ll_init(void *userdata, struct fuse_conn_info *conn) {
  sess_t *s = userdata;
  conn_cfg_t *c = &s->cfg;
  conn->want = (conn->want | (c->want & conn->capable)) & ~c->unwant;
  if (c->max_write && c->max_write < conn->max_write) conn->max_write = c->max_write;
  if (c->has_max_read) conn->max_read = c->max_read;
  if (c->has_max_readahead && c->max_readahead < conn->max_readahead) conn->max_readahead = c->max_readahead;
  if (c->has_max_background) conn->max_background = c->max_background;
  if (c->has_congestion_threshold) conn->congestion_threshold = c->congestion_threshold;
  if (c->has_time_gran) conn->time_gran = c->time_gran;
  msg_t *m = msg_new(0);
  if (!m) return;
  m->kind = MSG_INIT;
  m->conn = *conn;
  msg_post(s, m);
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
  NAMED_REQUEST(OP_LOOKUP, parent, name);
  req_post(req, m);
}

static void post_forgets(fuse_req_t req, size_t count, const struct fuse_forget_data *list) {
  sess_t *s = fuse_req_userdata(req);
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < count && s->nfattrs > 0; i++) fast_attr_drop_locked(s, list[i].ino);
  int running = s->state == ST_RUNNING;
  pthread_mutex_unlock(&s->lock);
  if (running && count > 0) {
    msg_t *m = msg_new(count * 2 * sizeof(uint64_t));
    if (m) {
      m->kind = MSG_FORGET;
      m->op = OP_FORGET;
      m->forgets = (uint64_t *) m->extra;
      m->nforgets = count;
      for (size_t i = 0; i < count; i++) {
        m->forgets[2 * i] = list[i].ino;
        m->forgets[2 * i + 1] = list[i].nlookup;
      }
      msg_post(s, m);
    }
  }
  fuse_reply_none(req);
}

static void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  struct fuse_forget_data one = { .ino = ino, .nlookup = nlookup };
  post_forgets(req, 1, &one);
}

static void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
  post_forgets(req, count, forgets);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if (fast_attr_here(req, ino)) return;
  msg_t *m = req_begin(req, OP_GETATTR, 0, 0);
  if (!m) return;
  m->ino = ino;
  if (fi) { m->has_fh = 1; m->fh = fi->fh; }
  req_post(req, m);
}

static void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
  msg_t *m = req_begin(req, OP_SETATTR, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->st = *attr;
  m->u1 = (uint32_t) to_set;
  if (fi) { m->has_fh = 1; m->fh = fi->fh; }
  req_post(req, m);
}

static void ll_readlink(fuse_req_t req, fuse_ino_t ino) {
  msg_t *m = req_begin(req, OP_READLINK, 0, 0);
  if (!m) return;
  m->ino = ino;
  req_post(req, m);
}

static void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
  NAMED_REQUEST(OP_MKNOD, parent, name);
  m->u1 = mode;
  m->u2 = (uint32_t) rdev;
  req_post(req, m);
}

static void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
  NAMED_REQUEST(OP_MKDIR, parent, name);
  m->u1 = mode;
  req_post(req, m);
}

static void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
  NAMED_REQUEST(OP_UNLINK, parent, name);
  req_post(req, m);
}

static void ll_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
  NAMED_REQUEST(OP_RMDIR, parent, name);
  req_post(req, m);
}

static void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
  if (!name_ok(req, name) || !name_ok(req, link)) return;
  size_t n = strlen(name), n2 = strlen(link), at = 0;
  msg_t *m = req_begin(req, OP_SYMLINK, 0, n + n2 + 2);
  if (!m) return;
  m->ino = parent;
  m->name = put_name(m, &at, name, n);
  m->name_len = n;
  m->name2 = put_name(m, &at, link, n2);
  m->name2_len = n2;
  req_post(req, m);
}

static void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
                      unsigned int flags) {
  if (!name_ok(req, name) || !name_ok(req, newname)) return;
  size_t n = strlen(name), n2 = strlen(newname), at = 0;
  msg_t *m = req_begin(req, OP_RENAME, 0, n + n2 + 2);
  if (!m) return;
  m->ino = parent;
  m->name = put_name(m, &at, name, n);
  m->name_len = n;
  m->ino2 = newparent;
  m->name2 = put_name(m, &at, newname, n2);
  m->name2_len = n2;
  m->u1 = flags;
  req_post(req, m);
}

static void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
  NAMED_REQUEST(OP_LINK, newparent, newname);
  m->ino2 = ino;
  req_post(req, m);
}

static void ll_open_common(fuse_req_t req, int op, fuse_ino_t ino, struct fuse_file_info *fi) {
  msg_t *m = req_begin(req, op, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->u1 = (uint32_t) fi->flags;
  req_post(req, m);
}

/* A read-only open of an inode JS listed is answered here (see the top of this file). */
static int open_here(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if ((fi->flags & (O_ACCMODE | O_TRUNC | O_APPEND | O_CREAT | O_DIRECT)) != O_RDONLY) return 0;
  sess_t *s = fuse_req_userdata(req);
  pthread_mutex_lock(&s->lock);
  int here = s->state == ST_RUNNING && bits_has(&s->fast, ino);
  if (here) s->fast_opens++;
  pthread_mutex_unlock(&s->lock);
  if (!here) return 0;
  fi->fh = FAST_FH;
  fi->keep_cache = 1;
  /* Each close(2) flushes: a POSIX lock taken through the descriptor goes with its owner's close. */
  fi->noflush = 0;
  fi->direct_io = 0;
  fuse_reply_open(req, fi);
  return 1;
}

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if (open_here(req, ino, fi)) return;
  ll_open_common(req, OP_OPEN, ino, fi);
}

static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  ll_open_common(req, OP_OPENDIR, ino, fi);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  msg_t *m = req_begin(req, OP_READ, (uint32_t) size, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->u1 = (uint32_t) size;
  m->off = off;
  m->u2 = (uint32_t) fi->flags;
  req_post(req, m);
}

static void ll_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  void *copy = malloc(size ? size : 1);
  if (!copy) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  memcpy(copy, buf, size);
  msg_t *m = req_begin(req, OP_WRITE, 0, 0);
  if (!m) {
    free(copy);
    return;
  }
  m->ino = ino;
  m->fh = fi->fh;
  m->data = copy;
  m->data_len = size;
  m->off = off;
  m->u1 = (uint32_t) fi->flags;
  m->u2 = fi->writepage;
  req_post(req, m);
}

static void ll_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if (fi->fh == FAST_FH && fast_close_here(req, ino)) {
    fuse_reply_err(req, 0);
    return;
  }
  msg_t *m = req_begin(req, OP_FLUSH, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->owner = fi->lock_owner;
  req_post(req, m);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if (fi->fh == FAST_FH && fast_close_here(req, ino)) {
    sess_t *s = fuse_req_userdata(req);
    pthread_mutex_lock(&s->lock);
    s->fast_releases++;
    pthread_mutex_unlock(&s->lock);
    fuse_reply_err(req, 0);
    return;
  }
  msg_t *m = req_begin(req, OP_RELEASE, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->u1 = (uint32_t) fi->flags;
  m->u2 = fi->flush;
  m->u3 = fi->flock_release;
  m->owner = fi->lock_owner;
  req_post(req, m);
}

static void ll_fsync_common(fuse_req_t req, int op, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  msg_t *m = req_begin(req, op, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->u1 = datasync != 0;
  req_post(req, m);
}

static void ll_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  ll_fsync_common(req, OP_FSYNC, ino, datasync, fi);
}

static void ll_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  ll_fsync_common(req, OP_FSYNCDIR, ino, datasync, fi);
}

static void ll_readdir_common(fuse_req_t req, int op, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  msg_t *m = req_begin(req, op, (uint32_t) size, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->u1 = (uint32_t) size;
  m->off = off;
  req_post(req, m);
}

static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  ll_readdir_common(req, OP_READDIR, ino, size, off, fi);
}

static void ll_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  ll_readdir_common(req, OP_READDIRPLUS, ino, size, off, fi);
}

static void ll_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  msg_t *m = req_begin(req, OP_RELEASEDIR, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  req_post(req, m);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino) {
  msg_t *m = req_begin(req, OP_STATFS, 0, 0);
  if (!m) return;
  m->ino = ino;
  req_post(req, m);
}

static void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags) {
  if (!name_ok(req, name)) return;
  void *copy = malloc(size ? size : 1);
  if (!copy) {
    fuse_reply_err(req, ENOMEM);
    return;
  }
  memcpy(copy, value, size);
  size_t n = strlen(name), at = 0;
  msg_t *m = req_begin(req, OP_SETXATTR, 0, n + 1);
  if (!m) {
    free(copy);
    return;
  }
  m->ino = ino;
  m->name = put_name(m, &at, name, n);
  m->name_len = n;
  m->data = copy;
  m->data_len = size;
  m->u1 = (uint32_t) flags;
  req_post(req, m);
}

/* The kernel's getxattr of security.capability for an inode JS listed (noCaps) is answered here. */
static int nocaps_here(fuse_req_t req, fuse_ino_t ino, const char *name) {
  if (strcmp(name, "security.capability") != 0) return 0;
  sess_t *s = fuse_req_userdata(req);
  pthread_mutex_lock(&s->lock);
  int here = s->state == ST_RUNNING && bits_has(&s->nocaps, ino);
  pthread_mutex_unlock(&s->lock);
  if (here) fuse_reply_err(req, ENODATA);
  return here;
}

static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
  if (!name_ok(req, name)) return;
  if (nocaps_here(req, ino, name)) return;
  size_t n = strlen(name), at = 0;
  msg_t *m = req_begin(req, OP_GETXATTR, (uint32_t) size, n + 1);
  if (!m) return;
  m->ino = ino;
  m->name = put_name(m, &at, name, n);
  m->name_len = n;
  m->u1 = (uint32_t) size;
  req_post(req, m);
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  msg_t *m = req_begin(req, OP_LISTXATTR, (uint32_t) size, 0);
  if (!m) return;
  m->ino = ino;
  m->u1 = (uint32_t) size;
  req_post(req, m);
}

static void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
  NAMED_REQUEST(OP_REMOVEXATTR, ino, name);
  req_post(req, m);
}

static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask) {
  msg_t *m = req_begin(req, OP_ACCESS, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->u1 = (uint32_t) mask;
  req_post(req, m);
}

static void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
  NAMED_REQUEST(OP_CREATE, parent, name);
  m->u1 = mode;
  m->u2 = (uint32_t) fi->flags;
  req_post(req, m);
}

static void ll_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock) {
  msg_t *m = req_begin(req, OP_GETLK, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->owner = fi->lock_owner;
  m->lk = *lock;
  req_post(req, m);
}

static void ll_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock, int sleep) {
  msg_t *m = req_begin(req, OP_SETLK, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->owner = fi->lock_owner;
  m->lk = *lock;
  m->u1 = sleep != 0;
  req_post(req, m);
}

static void ll_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op) {
  msg_t *m = req_begin(req, OP_FLOCK, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->owner = fi->lock_owner;
  m->u1 = (uint32_t) op;
  req_post(req, m);
}

static void ll_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, struct fuse_file_info *fi) {
  msg_t *m = req_begin(req, OP_FALLOCATE, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->u1 = (uint32_t) mode;
  m->off = offset;
  m->len = length;
  req_post(req, m);
}

static void ll_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi) {
  msg_t *m = req_begin(req, OP_LSEEK, 0, 0);
  if (!m) return;
  m->ino = ino;
  m->fh = fi->fh;
  m->off = off;
  m->u1 = (uint32_t) whence;
  req_post(req, m);
}

static void ll_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in, fuse_ino_t ino_out,
                               off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags) {
  msg_t *m = req_begin(req, OP_COPY_FILE_RANGE, 0, 0);
  if (!m) return;
  m->ino = ino_in;
  m->fh = fi_in->fh;
  m->off = off_in;
  m->ino2 = ino_out;
  m->fh2 = fi_out->fh;
  m->off2 = off_out;
  m->len = (int64_t) len;
  m->u1 = (uint32_t) flags;
  req_post(req, m);
}

/* The libfuse operation table: only the operations JS implements (bit i of `mask` = OP i). For
   the others libfuse answers by itself: ENOSYS, except open and opendir (success, fh 0),
   release and releasedir (success), statfs (a zeroed one) and forget (nothing to answer). */
static void fill_ops(struct fuse_lowlevel_ops *o, uint64_t mask) {
  memset(o, 0, sizeof *o);
  o->init = ll_init;
#define SET(OPC, field, fn) \
  if (mask & (1ull << OPC)) o->field = fn;
  SET(OP_LOOKUP, lookup, ll_lookup);
  SET(OP_FORGET, forget, ll_forget);
  SET(OP_FORGET, forget_multi, ll_forget_multi);
  SET(OP_GETATTR, getattr, ll_getattr);
  SET(OP_SETATTR, setattr, ll_setattr);
  SET(OP_READLINK, readlink, ll_readlink);
  SET(OP_MKNOD, mknod, ll_mknod);
  SET(OP_MKDIR, mkdir, ll_mkdir);
  SET(OP_UNLINK, unlink, ll_unlink);
  SET(OP_RMDIR, rmdir, ll_rmdir);
  SET(OP_SYMLINK, symlink, ll_symlink);
  SET(OP_RENAME, rename, ll_rename);
  SET(OP_LINK, link, ll_link);
  SET(OP_OPEN, open, ll_open);
  SET(OP_READ, read, ll_read);
  SET(OP_WRITE, write, ll_write);
  SET(OP_FLUSH, flush, ll_flush);
  SET(OP_RELEASE, release, ll_release);
  SET(OP_FSYNC, fsync, ll_fsync);
  SET(OP_OPENDIR, opendir, ll_opendir);
  SET(OP_READDIR, readdir, ll_readdir);
  SET(OP_READDIRPLUS, readdirplus, ll_readdirplus);
  SET(OP_RELEASEDIR, releasedir, ll_releasedir);
  SET(OP_FSYNCDIR, fsyncdir, ll_fsyncdir);
  SET(OP_STATFS, statfs, ll_statfs);
  SET(OP_SETXATTR, setxattr, ll_setxattr);
  SET(OP_GETXATTR, getxattr, ll_getxattr);
  SET(OP_LISTXATTR, listxattr, ll_listxattr);
  SET(OP_REMOVEXATTR, removexattr, ll_removexattr);
  SET(OP_ACCESS, access, ll_access);
  SET(OP_CREATE, create, ll_create);
  SET(OP_GETLK, getlk, ll_getlk);
  SET(OP_SETLK, setlk, ll_setlk);
  SET(OP_FLOCK, flock, ll_flock);
  SET(OP_FALLOCATE, fallocate, ll_fallocate);
  SET(OP_LSEEK, lseek, ll_lseek);
  SET(OP_COPY_FILE_RANGE, copy_file_range, ll_copy_file_range);
#undef SET
}

/* ---- the notify thread ------------------------------------------------------------------- */

/* Unmount that lets the kernel write back dirty pages first (not lazy): umount2 as root, else
   fusermount3 -u. 0, or -errno (EBUSY while files are open). */
static int polite_unmount(sess_t *s) {
  if (geteuid() == 0) return umount2(s->mountpoint, 0) == 0 ? 0 : -errno;
  pid_t pid;
  char *argv[] = { "fusermount3", "-u", "-q", "--", s->mountpoint, NULL };
  int rc = posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ);
  if (rc != 0) return -rc;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -errno;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EBUSY;
}

static void request_stop(sess_t *s) {
  __atomic_store_n(&s->stop, 1, __ATOMIC_SEQ_CST);
  wake(s->wake_fd);
}

static void block_signals(void) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
}

static void *worker_main(void *arg) {
  sess_t *s = arg;
  block_signals();
  pthread_mutex_lock(&s->lock);
  while (!s->mounted && !s->worker_quit) pthread_cond_wait(&s->cond, &s->lock);
  for (;;) {
    while (!s->jobs && !s->worker_quit) pthread_cond_wait(&s->cond, &s->lock);
    job_t *j = s->jobs;
    if (!j) break;
    s->jobs = j->next;
    if (!s->jobs) s->jobs_tail = NULL;
    int quit = s->worker_quit;
    pthread_mutex_unlock(&s->lock);
    int rc = -ENOTCONN;
    if (!quit) {
      switch (j->kind) {
        case JOB_INVAL_INODE:
          rc = fuse_lowlevel_notify_inval_inode(s->se, j->ino, j->off, j->len);
          break;
        case JOB_INVAL_ENTRY:
          rc = fuse_lowlevel_notify_inval_entry(s->se, j->ino, j->name, j->name_len);
          break;
        case JOB_DELETE:
          rc = fuse_lowlevel_notify_delete(s->se, j->ino, j->child, j->name, j->name_len);
          break;
        case JOB_EXPIRE_ENTRY:
          /* The entry stays hashed (a process whose working directory is below it keeps a
             path); its next use looks it up again. Kernels before 6.2: invalidated instead. */
          rc = fuse_lowlevel_notify_expire_entry(s->se, j->ino, j->name, j->name_len, FUSE_LL_EXPIRE_ONLY);
          if (rc == -ENOSYS || rc == -EINVAL) rc = fuse_lowlevel_notify_inval_entry(s->se, j->ino, j->name, j->name_len);
          break;
        case JOB_UNMOUNT:
          pthread_mutex_lock(&s->lock);
          s->unmount_requested = 1;
          pthread_mutex_unlock(&s->lock);
          rc = polite_unmount(s);
          request_stop(s);
          break;
      }
    }
    msg_t *m = msg_new(0);
    if (m) {
      m->kind = MSG_NOTIFY_DONE;
      m->id = j->id;
      m->rc = rc;
      msg_post(s, m);
    }
    free(j);
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  wake(s->done_fd);
  return NULL;
}

/* ---- the loop thread --------------------------------------------------------------------- */

static void *loop_main(void *arg) {
  sess_t *s = arg;
  block_signals();
  const char *reason = "external";
  char text[512] = "";
  int gone = 0, mounted = 0;
  struct fuse_buf fbuf = { .mem = NULL };

  tl_last_log[0] = '\0';
  tl_log_open = 0;
  if (fuse_session_mount(s->se, s->mountpoint) != 0) {
    reason = "error";
    snprintf(text, sizeof text, "%s", tl_last_log[0] ? tl_last_log : "fuse_session_mount failed");
  } else {
    mounted = 1;
    int fd = fuse_session_fd(s->se);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    pthread_mutex_lock(&s->lock);
    s->mounted = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = s->wake_fd, .events = POLLIN } };
    /* Spinning needs a second CPU: on one, it takes the CPU the JS thread needs to answer. */
    long spin_ns = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? (long) s->cfg.spin_us * 1000 : 0;
    for (;;) {
      if (__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) break;
      int res = fuse_session_receive_buf(s->se, &fbuf);
      /* Nothing queued: with spinUs, go on reading for that long before sleeping in poll (a
         thread woken from poll costs tens of µs on a virtual machine; the next request of a
         caller waiting on each answer comes within that). */
      if (res == -EAGAIN && spin_ns > 0) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
          res = fuse_session_receive_buf(s->se, &fbuf);
          if (res != -EAGAIN) break;
          clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < spin_ns && !__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST));
      }
      if (res == -EAGAIN) {
        if (poll(p, 2, -1) < 0 && errno != EINTR) {
          reason = "error";
          snprintf(text, sizeof text, "poll: %s", strerror(errno));
          break;
        }
        if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
          gone = 1;
          break;
        }
        continue;
      }
      if (res == -EINTR) continue;
      if (res == 0 || fuse_session_exited(s->se)) {
        gone = 1; /* ENODEV: unmounted, or the connection was aborted */
        break;
      }
      if (res < 0) {
        reason = "error";
        snprintf(text, sizeof text, "reading /dev/fuse: %s", strerror(-res));
        break;
      }
      fuse_session_process_buf(s->se, &fbuf);
      if (fuse_session_exited(s->se)) {
        reason = "error";
        snprintf(text, sizeof text, "%s", tl_last_log[0] ? tl_last_log : "libfuse ended the session");
        gone = 1;
        break;
      }
    }
  }

  /* End: answer what JS still holds, stop the notify thread while answering new requests. */
  if (mounted && !gone) {
    struct pollfd pf = { .fd = fuse_session_fd(s->se), .events = 0 };
    if (poll(&pf, 1, 0) == 1 && (pf.revents & POLLERR)) gone = 1;
  }
  if (gone) fuse_session_exit(s->se); /* replies to a closed connection fail quietly */
  pthread_mutex_lock(&s->lock);
  s->state = ST_ENDING;
  if (s->unmount_requested && strcmp(reason, "error") != 0) reason = "unmount";
  size_t n = 0;
  fuse_req_t *pending = s->live ? malloc(s->live * sizeof(fuse_req_t)) : NULL;
  for (uint32_t i = 0; i < s->nslots; i++) {
    if (s->slots[i].req) {
      if (pending) pending[n++] = s->slots[i].req;
      slot_free(s, &s->slots[i]);
    }
  }
  s->worker_quit = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < n; i++) fuse_reply_err(pending[i], ENOTCONN);
  free(pending);

  if (s->worker_started) {
    int fd = mounted ? fuse_session_fd(s->se) : -1;
    for (;;) {
      struct pollfd p[2] = { { .fd = s->done_fd, .events = POLLIN }, { .fd = gone ? -1 : fd, .events = POLLIN } };
      if (poll(p, 2, -1) < 0 && errno != EINTR) break;
      if (p[0].revents & POLLIN) break;
      if (p[1].revents & (POLLERR | POLLHUP | POLLNVAL)) {
        gone = 1;
        continue;
      }
      if (p[1].revents & POLLIN) {
        int res = fuse_session_receive_buf(s->se, &fbuf);
        if (res > 0) fuse_session_process_buf(s->se, &fbuf);
        else if (res == 0 || (res < 0 && res != -EAGAIN && res != -EINTR)) gone = 1;
      }
    }
    pthread_join(s->worker_thread, NULL);
    s->worker_started = 0;
  }
  pthread_mutex_lock(&s->lock);
  while (s->replying > 0) pthread_cond_wait(&s->cond, &s->lock); /* a reply being written on the JS thread */
  pthread_mutex_unlock(&s->lock);
  if (mounted) {
    fuse_session_exit(s->se);
    fuse_session_unmount(s->se);
  }
  free(fbuf.mem);

  size_t tlen = strlen(text);
  msg_t *m = msg_new(tlen + 1);
  if (m) {
    m->kind = MSG_END;
    memcpy(m->extra, text, tlen + 1);
    m->text = reason; /* a string literal */
    m->name = tlen ? m->extra : NULL;
    msg_post(s, m);
  }
  return NULL;
}

/* ---- end of a session (JS thread, or the environment's cleanup) -------------------------- */

static void env_cleanup(void *arg);

static void finish(sess_t *s, int from_cleanup) {
  if (s->finished) return;
  if (s->loop_started && !s->loop_joined) {
    pthread_join(s->loop_thread, NULL);
    s->loop_joined = 1;
  }
  if (s->worker_started) { /* the loop thread never ran */
    pthread_mutex_lock(&s->lock);
    s->worker_quit = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->worker_thread, NULL);
    s->worker_started = 0;
  }
  if (s->se) {
    fuse_session_destroy(s->se);
    s->se = NULL;
  }
  pthread_mutex_lock(&s->lock);
  s->state = ST_ENDED;
  pthread_mutex_unlock(&s->lock);
  if (s->wake_fd >= 0) close(s->wake_fd);
  if (s->done_fd >= 0) close(s->done_fd);
  s->wake_fd = s->done_fd = -1;
  s->finished = 1;
  if (!from_cleanup) {
    if (s->hook_added) napi_remove_env_cleanup_hook(s->env, env_cleanup, s);
    s->hook_added = 0;
    if (s->tsfn) napi_release_threadsafe_function(s->tsfn, napi_tsfn_release);
    s->tsfn = NULL;
    if (s->self_ref) napi_delete_reference(s->env, s->self_ref);
    s->self_ref = NULL;
  }
}

/* The environment is going away with the session running (process exit): stop, unmount, join. */
static void env_cleanup(void *arg) {
  sess_t *s = arg;
  s->hook_added = 0;
  if (s->finished) return;
  pthread_mutex_lock(&s->lock);
  s->unmount_requested = 1;
  pthread_mutex_unlock(&s->lock);
  request_stop(s);
  finish(s, 1);
}

static void sess_free(sess_t *s) {
  job_t *j = s->jobs;
  while (j) {
    job_t *next = j->next;
    free(j);
    j = next;
  }
  free(s->slots);
  free(s->fast.b);
  free(s->locked.b);
  free(s->nocaps.b);
  free(s->fattrs);
  free(s->mountpoint);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}

/* The JS handle was collected: it can only be after the session ended (self_ref holds it before). */
static void sess_finalize(napi_env env, void *data, void *hint) {
  sess_t *s = data;
  if (s->finished) sess_free(s);
}

/* ---- JS values --------------------------------------------------------------------------- */

static napi_value undef(napi_env env) {
  napi_value v;
  napi_get_undefined(env, &v);
  return v;
}

static napi_value num(napi_env env, double d) {
  napi_value v;
  napi_create_double(env, d, &v);
  return v;
}

static napi_value boolean(napi_env env, int b) {
  napi_value v;
  napi_get_boolean(env, b != 0, &v);
  return v;
}

static napi_value str(napi_env env, const char *s, size_t n) {
  napi_value v;
  napi_create_string_utf8(env, s, n, &v);
  return v;
}

static napi_value bigint_u64(napi_env env, uint64_t u) {
  napi_value v;
  napi_create_bigint_uint64(env, u, &v);
  return v;
}

static napi_value time_ns(napi_env env, const struct timespec *t) {
  napi_value v;
  napi_create_bigint_int64(env, (int64_t) t->tv_sec * 1000000000LL + t->tv_nsec, &v);
  return v;
}

static void set(napi_env env, napi_value obj, const char *key, napi_value v) {
  napi_set_named_property(env, obj, key, v);
}

static napi_value lock_object(napi_env env, const struct flock *lk) {
  napi_value o;
  napi_create_object(env, &o);
  set(env, o, "type", num(env, lk->l_type));
  set(env, o, "whence", num(env, lk->l_whence));
  set(env, o, "start", num(env, (double) lk->l_start));
  set(env, o, "len", num(env, (double) lk->l_len));
  set(env, o, "pid", num(env, lk->l_pid));
  return o;
}

static napi_value throw_type(napi_env env, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  napi_throw_type_error(env, NULL, buf);
  return NULL;
}

/* ---- call_js: messages on the JS thread -------------------------------------------------- */

static void free_data(napi_env env, void *data, void *hint) {
  free(data);
}

static void call_js(napi_env env, napi_value fn, void *context, void *data) {
  sess_t *s = context;
  msg_t *m = data;
  if (env == NULL || fn == NULL) { /* the environment is going away */
    msg_free(m);
    return;
  }
  napi_value argv[DISPATCH_ARGS];
  for (int i = 0; i < DISPATCH_ARGS; i++) argv[i] = undef(env);
  argv[0] = num(env, m->kind);
  argv[1] = num(env, m->op);
  argv[2] = num(env, (double) m->id);
  napi_value *a = &argv[7];

  switch (m->kind) {
    case MSG_REQUEST: {
      pthread_mutex_lock(&s->lock);
      int live = slot_find(s, m->id) != NULL;
      pthread_mutex_unlock(&s->lock);
      if (!live) { /* answered at the end of the session while queued */
        msg_free(m);
        return;
      }
      argv[3] = num(env, m->uid);
      argv[4] = num(env, m->gid);
      argv[5] = num(env, m->pid);
      argv[6] = num(env, m->umask);
      a[0] = num(env, (double) m->ino);
      switch (m->op) {
        case OP_LOOKUP: case OP_UNLINK: case OP_RMDIR: case OP_REMOVEXATTR:
          a[1] = str(env, m->name, m->name_len);
          break;
        case OP_GETATTR:
          if (m->has_fh) a[1] = num(env, (double) m->fh);
          break;
        case OP_SETATTR: {
          napi_value o;
          napi_create_object(env, &o);
          set(env, o, "mode", num(env, m->st.st_mode));
          set(env, o, "uid", num(env, m->st.st_uid));
          set(env, o, "gid", num(env, m->st.st_gid));
          set(env, o, "size", num(env, (double) m->st.st_size));
          set(env, o, "atimeNs", time_ns(env, &m->st.st_atim));
          set(env, o, "mtimeNs", time_ns(env, &m->st.st_mtim));
          set(env, o, "ctimeNs", time_ns(env, &m->st.st_ctim));
          a[1] = num(env, m->u1);
          a[2] = o;
          if (m->has_fh) a[3] = num(env, (double) m->fh);
          break;
        }
        case OP_MKNOD:
          a[1] = str(env, m->name, m->name_len);
          a[2] = num(env, m->u1);
          a[3] = num(env, m->u2);
          break;
        case OP_MKDIR:
          a[1] = str(env, m->name, m->name_len);
          a[2] = num(env, m->u1);
          break;
        case OP_SYMLINK:
          a[1] = str(env, m->name, m->name_len);
          a[2] = str(env, m->name2, m->name2_len);
          break;
        case OP_RENAME:
          a[1] = str(env, m->name, m->name_len);
          a[2] = num(env, (double) m->ino2);
          a[3] = str(env, m->name2, m->name2_len);
          a[4] = num(env, m->u1);
          break;
        case OP_LINK: /* ino, newparent, newname */
          a[0] = num(env, (double) m->ino2);
          a[1] = num(env, (double) m->ino);
          a[2] = str(env, m->name, m->name_len);
          break;
        case OP_OPEN: case OP_OPENDIR: case OP_ACCESS:
          a[1] = num(env, m->u1);
          break;
        case OP_READ:
          a[1] = num(env, (double) m->fh);
          a[2] = num(env, (double) m->off);
          a[3] = num(env, m->u1);
          a[4] = num(env, m->u2);
          break;
        case OP_WRITE: {
          napi_value buf;
          if (napi_create_external_buffer(env, m->data_len, m->data, free_data, NULL, &buf) == napi_ok) {
            m->data = NULL; /* freed with the Buffer */
          } else {
            void *copy;
            napi_create_buffer_copy(env, m->data_len, m->data, &copy, &buf);
          }
          a[1] = num(env, (double) m->fh);
          a[2] = num(env, (double) m->off);
          a[3] = buf;
          a[4] = num(env, m->u1);
          a[5] = boolean(env, m->u2);
          break;
        }
        case OP_FLUSH:
          a[1] = num(env, (double) m->fh);
          a[2] = bigint_u64(env, m->owner);
          break;
        case OP_RELEASE:
          a[1] = num(env, (double) m->fh);
          a[2] = num(env, m->u1);
          a[3] = boolean(env, m->u2);
          a[4] = boolean(env, m->u3);
          a[5] = bigint_u64(env, m->owner);
          break;
        case OP_FSYNC: case OP_FSYNCDIR:
          a[1] = num(env, (double) m->fh);
          a[2] = boolean(env, m->u1);
          break;
        case OP_READDIR: case OP_READDIRPLUS:
          a[1] = num(env, (double) m->fh);
          a[2] = num(env, (double) m->off);
          a[3] = num(env, m->u1);
          break;
        case OP_RELEASEDIR:
          a[1] = num(env, (double) m->fh);
          break;
        case OP_SETXATTR: {
          napi_value buf;
          void *copy;
          napi_create_buffer_copy(env, m->data_len, m->data, &copy, &buf);
          a[1] = str(env, m->name, m->name_len);
          a[2] = buf;
          a[3] = num(env, m->u1);
          break;
        }
        case OP_GETXATTR:
          a[1] = str(env, m->name, m->name_len);
          a[2] = num(env, m->u1);
          break;
        case OP_LISTXATTR:
          a[1] = num(env, m->u1);
          break;
        case OP_CREATE:
          a[1] = str(env, m->name, m->name_len);
          a[2] = num(env, m->u1);
          a[3] = num(env, m->u2);
          break;
        case OP_GETLK: case OP_SETLK:
          a[1] = num(env, (double) m->fh);
          a[2] = bigint_u64(env, m->owner);
          a[3] = lock_object(env, &m->lk);
          if (m->op == OP_SETLK) a[4] = boolean(env, m->u1);
          break;
        case OP_FLOCK:
          a[1] = num(env, (double) m->fh);
          a[2] = bigint_u64(env, m->owner);
          a[3] = num(env, m->u1);
          break;
        case OP_FALLOCATE:
          a[1] = num(env, (double) m->fh);
          a[2] = num(env, m->u1);
          a[3] = num(env, (double) m->off);
          a[4] = num(env, (double) m->len);
          break;
        case OP_LSEEK:
          a[1] = num(env, (double) m->fh);
          a[2] = num(env, (double) m->off);
          a[3] = num(env, m->u1);
          break;
        case OP_COPY_FILE_RANGE:
          a[1] = num(env, (double) m->fh);
          a[2] = num(env, (double) m->off);
          a[3] = num(env, (double) m->ino2);
          a[4] = num(env, (double) m->fh2);
          a[5] = num(env, (double) m->off2);
          a[6] = num(env, (double) m->len);
          a[7] = num(env, m->u1);
          break;
        default:
          break;
      }
      break;
    }
    case MSG_FORGET: {
      napi_value list;
      napi_create_array_with_length(env, m->nforgets * 2, &list);
      for (size_t i = 0; i < m->nforgets * 2; i++) napi_set_element(env, list, (uint32_t) i, num(env, (double) m->forgets[i]));
      argv[3] = list;
      break;
    }
    case MSG_INIT: {
      napi_value o;
      napi_create_object(env, &o);
      set(env, o, "protoMajor", num(env, m->conn.proto_major));
      set(env, o, "protoMinor", num(env, m->conn.proto_minor));
      set(env, o, "capable", num(env, m->conn.capable));
      set(env, o, "want", num(env, m->conn.want));
      set(env, o, "maxWrite", num(env, m->conn.max_write));
      set(env, o, "maxRead", num(env, m->conn.max_read));
      set(env, o, "maxReadahead", num(env, m->conn.max_readahead));
      set(env, o, "maxBackground", num(env, m->conn.max_background));
      set(env, o, "congestionThreshold", num(env, m->conn.congestion_threshold));
      set(env, o, "timeGran", num(env, m->conn.time_gran));
      argv[3] = o;
      break;
    }
    case MSG_NOTIFY_DONE:
      argv[3] = num(env, m->rc);
      break;
    case MSG_END:
      finish(s, 0);
      argv[3] = str(env, m->text, NAPI_AUTO_LENGTH);
      if (m->name) argv[4] = str(env, m->name, NAPI_AUTO_LENGTH);
      break;
    default:
      break;
  }

  napi_value global, result;
  napi_get_global(env, &global);
  napi_status st = napi_call_function(env, global, fn, DISPATCH_ARGS, argv, &result);
  if (st != napi_ok) {
    /* The dispatch function threw (the wrapper's never does): never let it reach the process;
       answer the request so the caller does not wait. */
    bool pending = false;
    napi_is_exception_pending(env, &pending);
    if (pending) {
      napi_value exc;
      napi_get_and_clear_last_exception(env, &exc);
    }
    fprintf(stderr, "svc_fuse3: the dispatch function threw on a message of kind %d\n", m->kind);
    if (m->kind == MSG_REQUEST) {
      fuse_req_t r = slot_take(s, m->id, NULL, NULL);
      if (r) {
        fuse_reply_err(r, EIO);
        reply_done(s);
      }
    }
  }
  msg_free(m);
}

/* ---- argument parsing -------------------------------------------------------------------- */

static sess_t *get_sess(napi_env env, napi_value v) {
  void *p = NULL;
  if (napi_get_value_external(env, v, &p) != napi_ok || !p) {
    throw_type(env, "not a session handle");
    return NULL;
  }
  return p;
}

/* A non-negative integer (number or bigint). 1 ok, 0 missing (undefined), -1 wrong type. */
static int get_u64v(napi_env env, napi_value v, uint64_t *out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_undefined || t == napi_null) return 0;
  if (t == napi_bigint) {
    bool lossless;
    if (napi_get_value_bigint_uint64(env, v, out, &lossless) != napi_ok || !lossless) return -1;
    return 1;
  }
  if (t == napi_number) {
    double d;
    napi_get_value_double(env, v, &d);
    if (!(d >= 0) || d > 9007199254740991.0 || d != (double) (uint64_t) d) return -1;
    *out = (uint64_t) d;
    return 1;
  }
  return -1;
}

/* A signed integer (number or bigint). */
static int get_i64v(napi_env env, napi_value v, int64_t *out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_undefined || t == napi_null) return 0;
  if (t == napi_bigint) {
    bool lossless;
    if (napi_get_value_bigint_int64(env, v, out, &lossless) != napi_ok || !lossless) return -1;
    return 1;
  }
  if (t == napi_number) {
    double d;
    napi_get_value_double(env, v, &d);
    if (!(d >= -9007199254740991.0 && d <= 9007199254740991.0) || d != (double) (int64_t) d) return -1;
    *out = (int64_t) d;
    return 1;
  }
  return -1;
}

static napi_value prop(napi_env env, napi_value obj, const char *key) {
  napi_value v = NULL;
  if (napi_get_named_property(env, obj, key, &v) != napi_ok) return undef(env);
  return v;
}

/* obj[key] as an unsigned integer; `def` when missing. Throws (returns 0) on a wrong type. */
static int get_u64(napi_env env, napi_value obj, const char *key, uint64_t def, uint64_t *out) {
  int r = get_u64v(env, prop(env, obj, key), out);
  if (r == 0) *out = def;
  if (r < 0) {
    throw_type(env, "%s must be a non-negative integer (number or bigint)", key);
    return 0;
  }
  return 1;
}

static int get_i64(napi_env env, napi_value obj, const char *key, int64_t def, int64_t *out) {
  int r = get_i64v(env, prop(env, obj, key), out);
  if (r == 0) *out = def;
  if (r < 0) {
    throw_type(env, "%s must be an integer (number or bigint)", key);
    return 0;
  }
  return 1;
}

static int get_double(napi_env env, napi_value obj, const char *key, double def, double *out) {
  napi_value v = prop(env, obj, key);
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_undefined) {
    *out = def;
    return 1;
  }
  if (t != napi_number) {
    throw_type(env, "%s must be a number", key);
    return 0;
  }
  napi_get_value_double(env, v, out);
  return 1;
}

static int get_bool(napi_env env, napi_value obj, const char *key) {
  napi_value v = prop(env, obj, key);
  bool b = false;
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_boolean) napi_get_value_bool(env, v, &b);
  return b;
}

/* Time in ns since the epoch (bigint) into a timespec. */
static int get_time(napi_env env, napi_value obj, const char *key, struct timespec *ts) {
  napi_value v = prop(env, obj, key);
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_undefined) {
    ts->tv_sec = 0;
    ts->tv_nsec = 0;
    return 1;
  }
  int64_t ns;
  bool lossless;
  if (t != napi_bigint || napi_get_value_bigint_int64(env, v, &ns, &lossless) != napi_ok || !lossless) {
    throw_type(env, "%s must be a bigint (ns since the epoch)", key);
    return 0;
  }
  int64_t sec = ns / 1000000000LL, nsec = ns % 1000000000LL;
  if (nsec < 0) {
    nsec += 1000000000LL;
    sec -= 1;
  }
  ts->tv_sec = sec;
  ts->tv_nsec = nsec;
  return 1;
}

static int get_attr(napi_env env, napi_value o, struct stat *st) {
  napi_valuetype t;
  napi_typeof(env, o, &t);
  if (t != napi_object) {
    throw_type(env, "attr must be an object");
    return 0;
  }
  uint64_t ino, mode, nlink, uid, gid, rdev, blksize, blocks;
  int64_t size;
  memset(st, 0, sizeof *st);
  if (!get_u64(env, o, "ino", 0, &ino) || !get_u64(env, o, "mode", 0, &mode) || !get_u64(env, o, "nlink", 1, &nlink) ||
      !get_u64(env, o, "uid", 0, &uid) || !get_u64(env, o, "gid", 0, &gid) || !get_u64(env, o, "rdev", 0, &rdev) ||
      !get_i64(env, o, "size", 0, &size) || !get_u64(env, o, "blksize", 0, &blksize) || !get_u64(env, o, "blocks", 0, &blocks) ||
      !get_time(env, o, "atimeNs", &st->st_atim) || !get_time(env, o, "mtimeNs", &st->st_mtim) ||
      !get_time(env, o, "ctimeNs", &st->st_ctim))
    return 0;
  st->st_ino = ino;
  st->st_mode = (mode_t) mode;
  st->st_nlink = (nlink_t) nlink;
  st->st_uid = (uid_t) uid;
  st->st_gid = (gid_t) gid;
  st->st_rdev = (dev_t) rdev;
  st->st_size = size;
  st->st_blksize = (blksize_t) blksize;
  st->st_blocks = (blkcnt_t) blocks;
  return 1;
}

static int get_entry(napi_env env, napi_value o, struct fuse_entry_param *e) {
  napi_valuetype t;
  napi_typeof(env, o, &t);
  if (t != napi_object) {
    throw_type(env, "entry must be an object");
    return 0;
  }
  memset(e, 0, sizeof *e);
  uint64_t ino, generation;
  if (!get_u64(env, o, "ino", 0, &ino) || !get_u64(env, o, "generation", 0, &generation) ||
      !get_double(env, o, "entryTimeout", 0, &e->entry_timeout) || !get_double(env, o, "attrTimeout", 0, &e->attr_timeout))
    return 0;
  e->ino = ino;
  e->generation = generation;
  napi_value attr = prop(env, o, "attr");
  napi_typeof(env, attr, &t);
  if (t == napi_undefined && ino == 0) return 1; /* negative entry */
  if (!get_attr(env, attr, &e->attr)) return 0;
  if (e->attr.st_ino == 0) e->attr.st_ino = ino;
  return 1;
}

static int get_open(napi_env env, napi_value o, struct fuse_file_info *fi) {
  napi_valuetype t;
  napi_typeof(env, o, &t);
  memset(fi, 0, sizeof *fi);
  if (t == napi_undefined) return 1;
  if (t != napi_object) {
    throw_type(env, "open reply must be an object");
    return 0;
  }
  uint64_t fh;
  if (!get_u64(env, o, "fh", 0, &fh)) return 0;
  fi->fh = fh;
  fi->direct_io = get_bool(env, o, "directIo");
  fi->keep_cache = get_bool(env, o, "keepCache");
  fi->nonseekable = get_bool(env, o, "nonseekable");
  fi->cache_readdir = get_bool(env, o, "cacheReaddir");
  fi->noflush = get_bool(env, o, "noflush");
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 15)
  fi->parallel_direct_writes = get_bool(env, o, "parallelDirectWrites");
#endif
  return 1;
}

/* A string argument into a malloc'ed NUL-terminated copy; NULL (thrown) on a wrong type. */
static char *get_cstring(napi_env env, napi_value v, const char *what, size_t *len_out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  size_t len = 0;
  if (t == napi_string) {
    napi_get_value_string_utf8(env, v, NULL, 0, &len);
    char *s = malloc(len + 1);
    if (!s) return NULL;
    napi_get_value_string_utf8(env, v, s, len + 1, &len);
    if (len_out) *len_out = len;
    return s;
  }
  bool isbuf = false;
  napi_is_buffer(env, v, &isbuf);
  if (isbuf) {
    void *data;
    napi_get_buffer_info(env, v, &data, &len);
    char *s = malloc(len + 1);
    if (!s) return NULL;
    memcpy(s, data, len);
    s[len] = '\0';
    if (len_out) *len_out = len;
    return s;
  }
  throw_type(env, "%s must be a string or a Buffer", what);
  return NULL;
}

static int get_args(napi_env env, napi_callback_info info, size_t want, napi_value *argv) {
  size_t argc = want;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return 0;
  for (size_t i = argc; i < want; i++) argv[i] = undef(env);
  return 1;
}

/* ---- replies (JS thread) ----------------------------------------------------------------- */

#define M(op) (1ull << (op))

/* The session whose request the current reply function took (JS thread): reply_done is called
   for it when the function returns (see reply_guard). */
static __thread sess_t *tl_replying;

/* Every reply function runs through this: it calls the function (its `data`) and then ends the
   reply it took, whatever path the function returned by (a getter of the reply data may call
   another reply function: the outer one's state is kept). */
static napi_value reply_guard(napi_env env, napi_callback_info info) {
  void *data = NULL;
  napi_get_cb_info(env, info, NULL, NULL, NULL, &data);
  sess_t *outer = tl_replying;
  tl_replying = NULL;
  napi_value r = ((napi_callback) data)(env, info);
  if (tl_replying) reply_done(tl_replying);
  tl_replying = outer;
  return r;
}

/* The request `id` for a reply allowed for `ops`: taken from its slot, so the caller must
   answer it. NULL when it was already answered (or the session ended), NULL with an exception
   pending (answered EIO) when the reply does not fit the operation. */
static fuse_req_t take_for(napi_env env, napi_value h, napi_value idv, uint64_t ops, const char *what, int *op,
                           uint32_t *size) {
  sess_t *s = get_sess(env, h);
  if (!s) return NULL;
  uint64_t id;
  if (get_u64v(env, idv, &id) != 1) {
    throw_type(env, "request id must be a number");
    return NULL;
  }
  int o = -1;
  fuse_req_t req = slot_take(s, id, &o, size);
  if (!req) return NULL;
  tl_replying = s;
  if (!(ops & M(o))) {
    fuse_reply_err(req, EIO);
    throw_type(env, "%s does not answer %s (answered EIO)", what, OP_NAMES[o]);
    return NULL;
  }
  if (op) *op = o;
  return req;
}

static napi_value result(napi_env env, int sent) {
  return boolean(env, sent);
}

/* A reply whose data is invalid: answer EIO (the exception is already pending). */
static napi_value bad_reply(napi_env env, fuse_req_t req) {
  fuse_reply_err(req, EIO);
  return NULL;
}

static bool exception_pending(napi_env env) {
  bool p = false;
  napi_is_exception_pending(env, &p);
  return p;
}

/* replyErr(handle, id, errno): errno 0 is success for the operations that answer nothing else. */
static napi_value js_reply_err(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  uint64_t e;
  if (get_u64v(env, argv[2], &e) != 1 || e >= 1000) return throw_type(env, "errno must be an integer in [0, 1000)");
  fuse_req_t req = take_for(env, argv[0], argv[1], ~0ull, "replyErr", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  fuse_reply_err(req, (int) e);
  return result(env, 1);
}

static napi_value js_reply_entry(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_LOOKUP) | M(OP_MKNOD) | M(OP_MKDIR) | M(OP_SYMLINK) | M(OP_LINK),
                            "replyEntry", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  struct fuse_entry_param e;
  if (!get_entry(env, argv[2], &e)) return bad_reply(env, req);
  fuse_reply_entry(req, &e);
  return result(env, 1);
}

static napi_value js_reply_create(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  if (!get_args(env, info, 4, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_CREATE), "replyCreate", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  struct fuse_entry_param e;
  struct fuse_file_info fi;
  if (!get_entry(env, argv[2], &e) || !get_open(env, argv[3], &fi)) return bad_reply(env, req);
  fuse_reply_create(req, &e, &fi);
  return result(env, 1);
}

static napi_value js_reply_attr(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  if (!get_args(env, info, 4, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_GETATTR) | M(OP_SETATTR), "replyAttr", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  struct stat st;
  double timeout = 0;
  napi_valuetype t;
  napi_typeof(env, argv[3], &t);
  if (t == napi_number) napi_get_value_double(env, argv[3], &timeout);
  if (!get_attr(env, argv[2], &st)) return bad_reply(env, req);
  fuse_reply_attr(req, &st, timeout);
  return result(env, 1);
}

static napi_value js_reply_readlink(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_READLINK), "replyReadlink", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  char *target = get_cstring(env, argv[2], "target", NULL);
  if (!target) return exception_pending(env) ? bad_reply(env, req) : (fuse_reply_err(req, ENOMEM), result(env, 1));
  fuse_reply_readlink(req, target);
  free(target);
  return result(env, 1);
}

static napi_value js_reply_open(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_OPEN) | M(OP_OPENDIR), "replyOpen", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  struct fuse_file_info fi;
  if (!get_open(env, argv[2], &fi)) return bad_reply(env, req);
  fuse_reply_open(req, &fi);
  return result(env, 1);
}

static napi_value js_reply_write(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_WRITE) | M(OP_COPY_FILE_RANGE), "replyWrite", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  uint64_t count;
  if (get_u64v(env, argv[2], &count) != 1) {
    throw_type(env, "count must be a non-negative integer");
    return bad_reply(env, req);
  }
  fuse_reply_write(req, count);
  return result(env, 1);
}

/* replyBuf(handle, id, buffer): read (cut to the size asked), getxattr and listxattr data. */
static napi_value js_reply_buf(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  uint32_t size = 0;
  int op = -1;
  fuse_req_t req =
    take_for(env, argv[0], argv[1], M(OP_READ) | M(OP_GETXATTR) | M(OP_LISTXATTR) | M(OP_READLINK), "replyBuf", &op, &size);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  bool isbuf = false;
  napi_is_buffer(env, argv[2], &isbuf);
  if (!isbuf) {
    throw_type(env, "data must be a Buffer");
    return bad_reply(env, req);
  }
  void *data;
  size_t len;
  napi_get_buffer_info(env, argv[2], &data, &len);
  if (op == OP_READLINK) {
    char *target = malloc(len + 1);
    if (!target) {
      fuse_reply_err(req, ENOMEM);
      return result(env, 1);
    }
    memcpy(target, data, len);
    target[len] = '\0';
    fuse_reply_readlink(req, target);
    free(target);
    return result(env, 1);
  }
  if ((op == OP_GETXATTR || op == OP_LISTXATTR) && len > size) {
    fuse_reply_err(req, ERANGE);
    return result(env, 1);
  }
  if (len > size) len = size;
  fuse_reply_buf(req, data, len);
  return result(env, 1);
}

static napi_value js_reply_statfs(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_STATFS), "replyStatfs", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  napi_valuetype t;
  napi_typeof(env, argv[2], &t);
  if (t != napi_object) {
    throw_type(env, "statfs reply must be an object");
    return bad_reply(env, req);
  }
  struct statvfs sv;
  memset(&sv, 0, sizeof sv);
  uint64_t bsize, frsize, blocks, bfree, bavail, files, ffree, favail, namemax;
  napi_value o = argv[2];
  if (!get_u64(env, o, "bsize", 4096, &bsize) || !get_u64(env, o, "frsize", 0, &frsize) || !get_u64(env, o, "blocks", 0, &blocks) ||
      !get_u64(env, o, "bfree", 0, &bfree) || !get_u64(env, o, "bavail", 0, &bavail) || !get_u64(env, o, "files", 0, &files) ||
      !get_u64(env, o, "ffree", 0, &ffree) || !get_u64(env, o, "favail", 0, &favail) || !get_u64(env, o, "namemax", 255, &namemax))
    return bad_reply(env, req);
  sv.f_bsize = bsize;
  sv.f_frsize = frsize ? frsize : bsize;
  sv.f_blocks = blocks;
  sv.f_bfree = bfree;
  sv.f_bavail = bavail;
  sv.f_files = files;
  sv.f_ffree = ffree;
  sv.f_favail = favail;
  sv.f_namemax = namemax;
  fuse_reply_statfs(req, &sv);
  return result(env, 1);
}

static napi_value js_reply_xattr(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_GETXATTR) | M(OP_LISTXATTR), "replyXattr", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  uint64_t count;
  if (get_u64v(env, argv[2], &count) != 1) {
    throw_type(env, "size must be a non-negative integer");
    return bad_reply(env, req);
  }
  fuse_reply_xattr(req, count);
  return result(env, 1);
}

static napi_value js_reply_lock(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_GETLK), "replyLock", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  napi_valuetype t;
  napi_typeof(env, argv[2], &t);
  if (t != napi_object) {
    throw_type(env, "lock must be an object");
    return bad_reply(env, req);
  }
  struct flock lk;
  memset(&lk, 0, sizeof lk);
  int64_t type, whence, start, len, pid;
  if (!get_i64(env, argv[2], "type", F_UNLCK, &type) || !get_i64(env, argv[2], "whence", SEEK_SET, &whence) ||
      !get_i64(env, argv[2], "start", 0, &start) || !get_i64(env, argv[2], "len", 0, &len) || !get_i64(env, argv[2], "pid", 0, &pid))
    return bad_reply(env, req);
  lk.l_type = (short) type;
  lk.l_whence = (short) whence;
  lk.l_start = start;
  lk.l_len = len;
  lk.l_pid = (pid_t) pid;
  fuse_reply_lock(req, &lk);
  return result(env, 1);
}

static napi_value js_reply_lseek(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_LSEEK), "replyLseek", NULL, NULL);
  if (!req) return exception_pending(env) ? NULL : result(env, 0);
  int64_t off;
  if (get_i64v(env, argv[2], &off) != 1) {
    throw_type(env, "offset must be an integer");
    return bad_reply(env, req);
  }
  fuse_reply_lseek(req, off);
  return result(env, 1);
}

/* replyDir(handle, id, entries): packs entries in order with fuse_add_direntry (readdir) or
   fuse_add_direntry_plus (readdirplus) until the size asked for is full. Returns how many were
   packed, or -1 when the request was already answered (none reached the kernel). */
static napi_value js_reply_dir(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  uint32_t size = 0;
  int op = -1;
  fuse_req_t req = take_for(env, argv[0], argv[1], M(OP_READDIR) | M(OP_READDIRPLUS), "replyDir", &op, &size);
  if (!req) return exception_pending(env) ? NULL : num(env, -1);
  bool isarr = false;
  napi_is_array(env, argv[2], &isarr);
  if (!isarr) {
    throw_type(env, "entries must be an array");
    return bad_reply(env, req);
  }
  uint32_t count;
  napi_get_array_length(env, argv[2], &count);
  char *buf = malloc(size ? size : 1);
  if (!buf) {
    fuse_reply_err(req, ENOMEM);
    return num(env, 0);
  }
  size_t used = 0;
  uint32_t i;
  char name[1024];
  for (i = 0; i < count; i++) {
    napi_value ent;
    napi_get_element(env, argv[2], i, &ent);
    napi_valuetype t;
    napi_typeof(env, ent, &t);
    if (t != napi_object) {
      throw_type(env, "entries[%u] must be an object", i);
      break;
    }
    napi_value nv = prop(env, ent, "name");
    size_t nlen = 0;
    napi_typeof(env, nv, &t);
    if (t != napi_string || napi_get_value_string_utf8(env, nv, name, sizeof name, &nlen) != napi_ok || nlen == 0 ||
        nlen >= sizeof name - 1 || memchr(name, '/', nlen) || strlen(name) != nlen) {
      throw_type(env, "entries[%u].name must be a file name (no '/' or NUL, 1-1022 bytes)", i);
      break;
    }
    int64_t next;
    if (!get_i64(env, ent, "nextOffset", 0, &next)) break;
    size_t len;
    if (op == OP_READDIRPLUS) {
      struct fuse_entry_param e;
      napi_value ev = prop(env, ent, "entry");
      napi_typeof(env, ev, &t);
      if (t == napi_undefined) {
        uint64_t ino, mode;
        memset(&e, 0, sizeof e);
        if (!get_u64(env, ent, "ino", 0, &ino) || !get_u64(env, ent, "mode", 0, &mode)) break;
        e.attr.st_ino = ino;
        e.attr.st_mode = (mode_t) mode;
      } else if (!get_entry(env, ev, &e)) {
        break;
      }
      len = fuse_add_direntry_plus(req, buf + used, size - used, name, &e, next);
    } else {
      struct stat st;
      uint64_t ino, mode;
      memset(&st, 0, sizeof st);
      if (!get_u64(env, ent, "ino", 0, &ino) || !get_u64(env, ent, "mode", 0, &mode)) break;
      st.st_ino = ino;
      st.st_mode = (mode_t) mode;
      len = fuse_add_direntry(req, buf + used, size - used, name, &st, next);
    }
    if (len > size - used) break;
    used += len;
  }
  if (exception_pending(env)) {
    free(buf);
    return bad_reply(env, req);
  }
  fuse_reply_buf(req, buf, used);
  free(buf);
  return num(env, i);
}

/* ---- notify, unmount --------------------------------------------------------------------- */

/* notify(handle, kind, ino, offOrChild, len, name): queues a notification; returns its job id
   (the result comes as a MSG_NOTIFY_DONE message), or 0 when the session is not running. */
static napi_value js_notify(napi_env env, napi_callback_info info) {
  napi_value argv[6];
  if (!get_args(env, info, 6, argv)) return NULL;
  sess_t *s = get_sess(env, argv[0]);
  if (!s) return NULL;
  uint64_t kind, ino, child = 0;
  int64_t off = 0, len = 0;
  if (get_u64v(env, argv[1], &kind) != 1 || kind > JOB_EXPIRE_ENTRY) return throw_type(env, "bad notification kind");
  if (get_u64v(env, argv[2], &ino) != 1) return throw_type(env, "ino must be a non-negative integer");
  if (kind == JOB_INVAL_INODE) {
    if (get_i64v(env, argv[3], &off) != 1 || get_i64v(env, argv[4], &len) != 1) return throw_type(env, "off and len must be integers");
  } else if (kind == JOB_DELETE) {
    if (get_u64v(env, argv[3], &child) != 1) return throw_type(env, "child must be a non-negative integer");
  }
  size_t nlen = 0;
  char *name = NULL;
  if (kind != JOB_INVAL_INODE) {
    name = get_cstring(env, argv[5], "name", &nlen);
    if (!name) return NULL;
  }
  job_t *j = calloc(1, sizeof(job_t) + nlen + 1);
  if (!j) {
    free(name);
    return NULL;
  }
  j->kind = (int) kind;
  j->ino = ino;
  j->child = child;
  j->off = off;
  j->len = len;
  j->name_len = nlen;
  if (name) memcpy(j->name, name, nlen + 1);
  free(name);
  pthread_mutex_lock(&s->lock);
  /* What the kernel is told changed is not answered here any more. */
  fast_attr_drop_locked(s, ino);
  if (s->state != ST_RUNNING || s->worker_quit) {
    pthread_mutex_unlock(&s->lock);
    free(j);
    return num(env, 0);
  }
  j->id = ++s->next_job;
  if (j->id == 0) j->id = ++s->next_job;
  if (s->jobs_tail) s->jobs_tail->next = j;
  else s->jobs = j;
  s->jobs_tail = j;
  pthread_cond_broadcast(&s->cond);
  uint32_t id = j->id;
  pthread_mutex_unlock(&s->lock);
  return num(env, id);
}

/* Sets (on) or clears the bit of inode argv[1] in the session's set at byte offset `set` (fast,
   nocaps); ino 0 with off clears them all. Returns false when `ino` could not be listed. */
static napi_value toggle_inode(napi_env env, napi_callback_info info, size_t set) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  sess_t *s = get_sess(env, argv[0]);
  if (!s) return NULL;
  uint64_t ino;
  if (get_u64v(env, argv[1], &ino) != 1) return throw_type(env, "ino must be a non-negative integer");
  bool on = false;
  if (napi_get_value_bool(env, argv[2], &on) != napi_ok) return throw_type(env, "on must be a boolean");
  bits_t *bits = (bits_t *) ((char *) s + set);
  pthread_mutex_lock(&s->lock);
  int ok = 1;
  if (ino == 0 && !on) {
    if (bits->b) memset(bits->b, 0, bits->n);
  } else if (ino != 0) ok = bits_set(bits, ino, on);
  pthread_mutex_unlock(&s->lock);
  return boolean(env, ok);
}

/* fastOpen(handle, ino, on): read-only opens of `ino` are answered here (on) or go to JS (off);
   ino 0 with off: every inode goes to JS. Returns false when `ino` could not be listed. */
static napi_value js_fast_open(napi_env env, napi_callback_info info) {
  return toggle_inode(env, info, offsetof(sess_t, fast));
}

/* fastLocks(handle, ino, on): the flushes and releases of FAST_FH on `ino` go to JS (on: it holds
   locks taken through such opens) or are answered here (off). Returns false when `ino` could not
   be listed. */
static napi_value js_fast_locks(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  if (!get_args(env, info, 3, argv)) return NULL;
  sess_t *s = get_sess(env, argv[0]);
  if (!s) return NULL;
  uint64_t ino;
  if (get_u64v(env, argv[1], &ino) != 1 || ino == 0) return throw_type(env, "ino must be a positive integer");
  bool on = false;
  if (napi_get_value_bool(env, argv[2], &on) != napi_ok) return throw_type(env, "on must be a boolean");
  pthread_mutex_lock(&s->lock);
  int ok = bits_set(&s->locked, ino, on);
  pthread_mutex_unlock(&s->lock);
  return boolean(env, ok);
}

/* noCaps(handle, ino, on): the kernel's getxattr of security.capability for `ino` is answered
   ENODATA here (on) or goes to JS (off); ino 0 with off: every inode goes to JS. Returns false
   when `ino` could not be listed. */
static napi_value js_no_caps(napi_env env, napi_callback_info info) {
  return toggle_inode(env, info, offsetof(sess_t, nocaps));
}

/* invalAttr(handle, ino): the kernel drops the attributes it holds of `ino` (notify_inval_inode
   with a negative offset: not its pages), now, on the JS thread: the kernel takes no lock for
   it, so it cannot wait behind the notify thread's jobs, some of which wait for a directory's
   lock the kernel holds while it waits for the reply this call comes before. Returns 0, or the
   negative errno (-ENOENT: the kernel holds no such inode); -ENOTCONN when not running. */
static napi_value js_inval_attr(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  if (!get_args(env, info, 2, argv)) return NULL;
  sess_t *s = get_sess(env, argv[0]);
  if (!s) return NULL;
  uint64_t ino;
  if (get_u64v(env, argv[1], &ino) != 1 || ino == 0) return throw_type(env, "ino must be a positive integer");
  pthread_mutex_lock(&s->lock);
  fast_attr_drop_locked(s, ino);
  int running = s->state == ST_RUNNING && !s->worker_quit;
  pthread_mutex_unlock(&s->lock);
  if (!running) return num(env, -ENOTCONN);
  return num(env, fuse_lowlevel_notify_inval_inode(s->se, ino, -1, 0));
}

/* fastAttr(handle, ino, attr, timeout): the kernel's next getattr of directory `ino` within
   FAST_ATTR_NS is answered here with `attr` (attribute timeout `timeout` s), once; attr null:
   not (ino 0: for no inode). A request about `ino` that goes to JS, a notification about it and
   its forget drop it too. */
static napi_value js_fast_attr(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  if (!get_args(env, info, 4, argv)) return NULL;
  sess_t *s = get_sess(env, argv[0]);
  if (!s) return NULL;
  uint64_t ino;
  if (get_u64v(env, argv[1], &ino) != 1) return throw_type(env, "ino must be a non-negative integer");
  napi_valuetype t;
  napi_typeof(env, argv[2], &t);
  if (t == napi_null || t == napi_undefined) {
    pthread_mutex_lock(&s->lock);
    if (ino != 0) fast_attr_drop_locked(s, ino);
    else if (s->fattrs) {
      memset(s->fattrs, 0, FAST_ATTRS * sizeof(fast_attr_t));
      s->nfattrs = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return boolean(env, 1);
  }
  if (ino == 0) return throw_type(env, "ino must be a positive integer");
  struct stat st;
  if (!get_attr(env, argv[2], &st)) return NULL;
  double timeout = 0;
  if (napi_get_value_double(env, argv[3], &timeout) != napi_ok || !(timeout >= 0)) return throw_type(env, "timeout must be a non-negative number");
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += FAST_ATTR_NS / 1000000000LL;
  until.tv_nsec += FAST_ATTR_NS % 1000000000LL;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->lock);
  if (!s->fattrs) s->fattrs = calloc(FAST_ATTRS, sizeof(fast_attr_t));
  int ok = s->fattrs != NULL && s->state == ST_RUNNING;
  if (ok) {
    fast_attr_t *a = &s->fattrs[ino % FAST_ATTRS];
    if (a->ino == 0) s->nfattrs++;
    *a = (fast_attr_t){ .ino = ino, .st = st, .timeout = timeout, .until = until };
  }
  pthread_mutex_unlock(&s->lock);
  return boolean(env, ok);
}

/* fastOpenStats(handle): {opens, releases, getattrs} answered here so far. */
static napi_value js_fast_open_stats(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!get_args(env, info, 1, argv)) return NULL;
  sess_t *s = get_sess(env, argv[0]);
  if (!s) return NULL;
  pthread_mutex_lock(&s->lock);
  uint64_t opens = s->fast_opens, releases = s->fast_releases, getattrs = s->fast_getattrs;
  pthread_mutex_unlock(&s->lock);
  napi_value o;
  napi_create_object(env, &o);
  set(env, o, "opens", num(env, (double) opens));
  set(env, o, "releases", num(env, (double) releases));
  set(env, o, "getattrs", num(env, (double) getattrs));
  return o;
}

/* unmount(handle, polite): polite: a regular unmount from the notify thread first (the kernel
   writes back dirty pages through the session), then the end; else the end at once (lazy
   unmount). The session ends with a MSG_END message either way. */
static napi_value js_unmount(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  if (!get_args(env, info, 2, argv)) return NULL;
  sess_t *s = get_sess(env, argv[0]);
  if (!s) return NULL;
  bool polite = false;
  napi_get_value_bool(env, argv[1], &polite);
  pthread_mutex_lock(&s->lock);
  if (s->state != ST_RUNNING) {
    pthread_mutex_unlock(&s->lock);
    return undef(env);
  }
  if (polite && s->unmount_queued) { /* already on its way */
    pthread_mutex_unlock(&s->lock);
    return undef(env);
  }
  job_t *j = polite && s->worker_started && !s->worker_quit ? calloc(1, sizeof(job_t) + 1) : NULL;
  if (j) {
    s->unmount_queued = 1;
    j->kind = JOB_UNMOUNT;
    j->id = ++s->next_job;
    if (s->jobs_tail) s->jobs_tail->next = j;
    else s->jobs = j;
    s->jobs_tail = j;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return undef(env);
  }
  s->unmount_requested = 1;
  pthread_mutex_unlock(&s->lock);
  request_stop(s);
  return undef(env);
}

/* closeSync(handle): ends the session on this thread, without waiting for JS: requests still
   waiting are answered ENOTCONN, the mount is detached (lazy unmount) and the threads joined.
   For process exit, where the event loop will not run again; the End message still follows if
   it does. */
static napi_value js_close_sync(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  if (!get_args(env, info, 1, argv)) return NULL;
  sess_t *s = get_sess(env, argv[0]);
  if (!s) return NULL;
  if (s->finished) return undef(env);
  pthread_mutex_lock(&s->lock);
  s->unmount_requested = 1;
  pthread_mutex_unlock(&s->lock);
  request_stop(s);
  finish(s, 0);
  return undef(env);
}

/* ---- mount ------------------------------------------------------------------------------- */

static int cfg_u32(napi_env env, napi_value o, const char *key, uint32_t *out, int *has) {
  uint64_t v;
  int r = get_u64v(env, prop(env, o, key), &v);
  if (r < 0 || v > UINT32_MAX) {
    throw_type(env, "%s must be a 32-bit unsigned integer", key);
    return 0;
  }
  if (has) *has = r == 1;
  if (r == 1) *out = (uint32_t) v;
  return 1;
}

/* mount(mountpoint, args, opsMask, conn, dispatch): a session handle; the mount itself runs on
   the loop thread, which reports MSG_INIT (mounted, connection negotiated) or MSG_END.
   args: fuse_session_new's argument vector, e.g. ['svc', '-o', 'fsname=x,default_permissions'];
   opsMask: bit i set when JS implements operation i; conn: {want, unwant, maxWrite, maxRead,
   maxReadahead, maxBackground, congestionThreshold, timeGran, spinUs}. Throws when libfuse
   refuses the options (with libfuse's message). */
static napi_value js_mount(napi_env env, napi_callback_info info) {
  napi_value argv[5];
  if (!get_args(env, info, 5, argv)) return NULL;
  size_t mlen;
  char *mountpoint = get_cstring(env, argv[0], "mountpoint", &mlen);
  if (!mountpoint) return NULL;
  bool isarr = false;
  napi_is_array(env, argv[1], &isarr);
  uint64_t mask;
  napi_valuetype ft;
  napi_typeof(env, argv[4], &ft);
  if (!isarr || get_u64v(env, argv[2], &mask) != 1 || ft != napi_function) {
    free(mountpoint);
    return throw_type(env, "mount(mountpoint, args[], opsMask, conn, dispatch)");
  }
  sess_t *s = calloc(1, sizeof(sess_t));
  if (!s) {
    free(mountpoint);
    return NULL;
  }
  s->mountpoint = mountpoint;
  s->env = env;
  s->free_head = SLOT_NONE;
  s->wake_fd = s->done_fd = -1;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  napi_value conn = argv[3];
  if (!cfg_u32(env, conn, "want", &s->cfg.want, NULL) || !cfg_u32(env, conn, "unwant", &s->cfg.unwant, NULL) ||
      !cfg_u32(env, conn, "maxWrite", &s->cfg.max_write, NULL) || !cfg_u32(env, conn, "maxRead", &s->cfg.max_read, &s->cfg.has_max_read) ||
      !cfg_u32(env, conn, "maxReadahead", &s->cfg.max_readahead, &s->cfg.has_max_readahead) ||
      !cfg_u32(env, conn, "maxBackground", &s->cfg.max_background, &s->cfg.has_max_background) ||
      !cfg_u32(env, conn, "congestionThreshold", &s->cfg.congestion_threshold, &s->cfg.has_congestion_threshold) ||
      !cfg_u32(env, conn, "timeGran", &s->cfg.time_gran, &s->cfg.has_time_gran) ||
      !cfg_u32(env, conn, "spinUs", &s->cfg.spin_us, NULL)) {
    s->finished = 1;
    sess_free(s);
    return NULL;
  }

  uint32_t argc;
  napi_get_array_length(env, argv[1], &argc);
  char **args = calloc(argc + 2, sizeof(char *));
  int nargs = 0, ok = args != NULL;
  if (ok && argc == 0) args[nargs++] = strdup("svc-fuse3");
  for (uint32_t i = 0; ok && i < argc; i++) {
    napi_value v;
    napi_get_element(env, argv[1], i, &v);
    args[nargs] = get_cstring(env, v, "args[i]", NULL);
    if (!args[nargs]) ok = 0;
    else nargs++;
  }
  struct fuse_lowlevel_ops ops;
  fill_ops(&ops, mask);
  if (ok) {
    struct fuse_args fa = FUSE_ARGS_INIT(nargs, args);
    tl_last_log[0] = '\0';
    tl_log_open = 0;
    s->se = fuse_session_new(&fa, &ops, sizeof ops, s);
    fuse_opt_free_args(&fa);
  }
  for (int i = 0; i < nargs; i++) free(args[i]);
  free(args);
  if (!ok || !s->se) {
    s->finished = 1;
    sess_free(s);
    if (exception_pending(env)) return NULL;
    char msg[600];
    snprintf(msg, sizeof msg, "fuse_session_new: %s", tl_last_log[0] ? tl_last_log : "refused the arguments");
    napi_throw_error(env, NULL, msg);
    return NULL;
  }

  napi_value handle, name;
  s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  s->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd < 0 || s->done_fd < 0 || napi_create_external(env, s, sess_finalize, NULL, &handle) != napi_ok) {
    finish(s, 1);
    sess_free(s);
    napi_throw_error(env, NULL, "svc_fuse3: could not set up the session");
    return NULL;
  }
  napi_create_reference(env, handle, 1, &s->self_ref);
  napi_create_string_utf8(env, "svc_fuse3", NAPI_AUTO_LENGTH, &name);
  if (napi_create_threadsafe_function(env, argv[4], NULL, name, 0, 1, NULL, NULL, s, call_js, &s->tsfn) != napi_ok) {
    finish(s, 0);
    napi_throw_error(env, NULL, "svc_fuse3: could not create the thread-safe function");
    return NULL;
  }
  napi_add_env_cleanup_hook(env, env_cleanup, s);
  s->hook_added = 1;
  s->state = ST_RUNNING;
  if (pthread_create(&s->worker_thread, NULL, worker_main, s) == 0) s->worker_started = 1;
  if (!s->worker_started || pthread_create(&s->loop_thread, NULL, loop_main, s) != 0) {
    finish(s, 0);
    napi_throw_error(env, NULL, "svc_fuse3: could not start the session's threads");
    return NULL;
  }
  s->loop_started = 1;
  return handle;
}

/* ---- module ------------------------------------------------------------------------------ */

static void export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn);
  napi_set_named_property(env, exports, name, fn);
}

static void export_reply(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, reply_guard, (void *) cb, &fn);
  napi_set_named_property(env, exports, name, fn);
}

static napi_value init_module(napi_env env, napi_value exports) {
  fuse_set_log_func(log_func);
  export_fn(env, exports, "mount", js_mount);
  export_fn(env, exports, "unmount", js_unmount);
  export_fn(env, exports, "closeSync", js_close_sync);
  export_fn(env, exports, "notify", js_notify);
  export_fn(env, exports, "invalAttr", js_inval_attr);
  export_fn(env, exports, "fastOpen", js_fast_open);
  export_fn(env, exports, "fastOpenStats", js_fast_open_stats);
  export_fn(env, exports, "fastLocks", js_fast_locks);
  export_fn(env, exports, "noCaps", js_no_caps);
  export_fn(env, exports, "fastAttr", js_fast_attr);
  export_reply(env, exports, "replyErr", js_reply_err);
  export_reply(env, exports, "replyEntry", js_reply_entry);
  export_reply(env, exports, "replyCreate", js_reply_create);
  export_reply(env, exports, "replyAttr", js_reply_attr);
  export_reply(env, exports, "replyReadlink", js_reply_readlink);
  export_reply(env, exports, "replyOpen", js_reply_open);
  export_reply(env, exports, "replyWrite", js_reply_write);
  export_reply(env, exports, "replyBuf", js_reply_buf);
  export_reply(env, exports, "replyStatfs", js_reply_statfs);
  export_reply(env, exports, "replyXattr", js_reply_xattr);
  export_reply(env, exports, "replyLock", js_reply_lock);
  export_reply(env, exports, "replyLseek", js_reply_lseek);
  export_reply(env, exports, "replyDir", js_reply_dir);

  napi_value ops, caps;
  napi_create_array_with_length(env, OP_COUNT, &ops);
  for (uint32_t i = 0; i < OP_COUNT; i++) napi_set_element(env, ops, i, str(env, OP_NAMES[i], NAPI_AUTO_LENGTH));
  napi_set_named_property(env, exports, "ops", ops);

  napi_create_object(env, &caps);
#define CAP(n) set(env, caps, #n, num(env, FUSE_CAP_##n));
  CAP(ASYNC_READ) CAP(POSIX_LOCKS) CAP(ATOMIC_O_TRUNC) CAP(EXPORT_SUPPORT) CAP(DONT_MASK) CAP(SPLICE_WRITE)
  CAP(SPLICE_MOVE) CAP(SPLICE_READ) CAP(FLOCK_LOCKS) CAP(IOCTL_DIR) CAP(AUTO_INVAL_DATA) CAP(READDIRPLUS)
  CAP(READDIRPLUS_AUTO) CAP(ASYNC_DIO) CAP(WRITEBACK_CACHE) CAP(NO_OPEN_SUPPORT) CAP(PARALLEL_DIROPS)
  CAP(POSIX_ACL) CAP(HANDLE_KILLPRIV) CAP(CACHE_SYMLINKS) CAP(NO_OPENDIR_SUPPORT) CAP(EXPLICIT_INVAL_DATA)
#undef CAP
  napi_set_named_property(env, exports, "caps", caps);
  set(env, exports, "libfuseVersion", num(env, fuse_version()));
  set(env, exports, "fastFh", num(env, (double) FAST_FH));
  set(env, exports, "parallelDirectWrites", boolean(env, FUSE_VERSION >= FUSE_MAKE_VERSION(3, 15)));
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init_module)
