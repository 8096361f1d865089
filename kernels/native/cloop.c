/* commbench's native timed loop and C reference (built with the MPI's own mpicc).
 *
 * One engine, two uses:
 *   - a shared library loaded with ctypes (commbench.kernels.native): the harness times a
 *     library collective on its own buffers with no Python inside the timed span, and
 *     `--reference c` times the same call the way a C benchmark does;
 *   - with -DCB_MAIN, a standalone program (no Python in the process at all) that times the
 *     points of a file the benchmark writes: what commbench's readings are compared with.
 *
 * Handles come in as Fortran integers (mpi4py's py2f()), which is portable across MPI ABIs.
 * Timing modes:
 *   CB_PIPELINED  nccl-tests: one barrier, `iters` calls back to back, mean per call
 *   CB_LATENCY    OSU: a barrier before each call (outside the timed span), per-call samples
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  CB_ALLREDUCE = 0,
  CB_ALLTOALL = 1,
  CB_ALLTOALLV = 2,
  CB_ALLGATHER = 3,
  CB_REDUCE_SCATTER_BLOCK = 4,
  CB_BCAST = 5,
  CB_REDUCE = 6,
  CB_PERSISTENT = 7, /* MPI_Startall + MPI_Waitall over prepared persistent requests */
  CB_ROUNDS = 8      /* point-to-point rounds: post a round's Isend/Irecv, wait, next */
};
enum { CB_PIPELINED = 0, CB_LATENCY = 1 };

/* Mirrored field for field by commbench.kernels.native.Call (ctypes). */
typedef struct {
  int kind;
  int count; /* elements: allreduce/reduce/bcast count, alltoall and allgather per rank,
                reduce_scatter_block per rank */
  void *send;
  void *recv;
  MPI_Fint dtype, op, comm;
  int root;
  int inplace; /* the send buffer is MPI_IN_PLACE */
  const int *scounts, *sdispls, *rcounts, *rdispls; /* alltoallv, in dtype units */
  int nreq;                                         /* CB_PERSISTENT */
  MPI_Fint *reqs;
  int nrounds;             /* CB_ROUNDS: messages of round r are [first[r], first[r+1]) */
  const int *first;
  const int *peer, *bytes, *is_send;
  const MPI_Fint *msg_comm; /* the communicator each message is posted on */
  const int64_t *offset;    /* byte offset into send (sends) or recv (receives) */
} cb_call;

static int call_once(const cb_call *c, MPI_Comm comm, MPI_Datatype dt, MPI_Op op,
                     MPI_Request *scratch) {
  const void *send = c->inplace ? MPI_IN_PLACE : c->send;
  switch (c->kind) {
    case CB_ALLREDUCE:
      return MPI_Allreduce(send, c->recv, c->count, dt, op, comm);
    case CB_ALLTOALL:
      return MPI_Alltoall(c->send, c->count, dt, c->recv, c->count, dt, comm);
    case CB_ALLTOALLV:
      return MPI_Alltoallv(c->send, c->scounts, c->sdispls, dt, c->recv, c->rcounts,
                           c->rdispls, dt, comm);
    case CB_ALLGATHER:
      return MPI_Allgather(send, c->count, dt, c->recv, c->count, dt, comm);
    case CB_REDUCE_SCATTER_BLOCK:
      return MPI_Reduce_scatter_block(send, c->recv, c->count, dt, op, comm);
    case CB_BCAST:
      return MPI_Bcast(c->send, c->count, dt, c->root, comm);
    case CB_REDUCE:
      return MPI_Reduce(c->send, c->recv, c->count, dt, op, c->root, comm);
    case CB_PERSISTENT: {
      int err = MPI_Startall(c->nreq, scratch);
      return err ? err : MPI_Waitall(c->nreq, scratch, MPI_STATUSES_IGNORE);
    }
    case CB_ROUNDS:
      for (int r = 0; r < c->nrounds; r++) {
        int n = 0;
        for (int m = c->first[r]; m < c->first[r + 1]; m++) { /* sends first, as the cpu transport */
          if (!c->is_send[m]) continue;
          int err = MPI_Isend((char *)c->send + c->offset[m], c->bytes[m], MPI_BYTE,
                              c->peer[m], 0, MPI_Comm_f2c(c->msg_comm[m]), &scratch[n++]);
          if (err) return err;
        }
        for (int m = c->first[r]; m < c->first[r + 1]; m++) {
          if (c->is_send[m]) continue;
          int err = MPI_Irecv((char *)c->recv + c->offset[m], c->bytes[m], MPI_BYTE,
                              c->peer[m], 0, MPI_Comm_f2c(c->msg_comm[m]), &scratch[n++]);
          if (err) return err;
        }
        int err = MPI_Waitall(n, scratch, MPI_STATUSES_IGNORE);
        if (err) return err;
      }
      return MPI_SUCCESS;
  }
  return MPI_ERR_ARG;
}

/* Time `iters` calls after `warmup` untimed ones. CB_PIPELINED: out[k] = us from the start
 * to the end of call (k + 1) * every - 1 (and of the last call): ticks, ceil(iters / every)
 * of them, so a run's per-iteration spread is known at the cost of one clock read per
 * `every` calls; CB_LATENCY: out[i] = call i's us. `progress` (may be NULL) counts finished
 * calls, so a watchdog thread can tell a slow loop from a hung one. Returns an MPI error.
 *
 * One untimed call follows the timed ones (pipelined) or surrounds them (latency: the same
 * loop runs one more call each side, commbench.harness.iterclock.latency_calls): where
 * ranks share cores, a rank done early with the last timed call would otherwise run its
 * caller's code while the others still run theirs, and that call read 15x the others at
 * 256 B on 8 ranks sharing 2 cores (python -m commbench.benchmarks.loop_edges). */
int cb_time(const cb_call *c, int iters, int warmup, int mode, int every, double *out,
            volatile int64_t *progress) {
  MPI_Comm comm = MPI_Comm_f2c(c->comm);
  MPI_Datatype dt = c->dtype ? MPI_Type_f2c(c->dtype) : MPI_BYTE;
  MPI_Op op = c->op ? MPI_Op_f2c(c->op) : MPI_OP_NULL;
  int nscratch = c->kind == CB_PERSISTENT ? c->nreq : 0;
  if (c->kind == CB_ROUNDS)
    for (int r = 0; r < c->nrounds; r++)
      if (c->first[r + 1] - c->first[r] > nscratch) nscratch = c->first[r + 1] - c->first[r];
  MPI_Request *scratch = malloc(sizeof(MPI_Request) * (nscratch ? nscratch : 1));
  if (!scratch) return MPI_ERR_NO_MEM;
  if (c->kind == CB_PERSISTENT)
    for (int i = 0; i < c->nreq; i++) scratch[i] = MPI_Request_f2c(c->reqs[i]);
  int err = MPI_SUCCESS;
  for (int i = 0; i < warmup && !err; i++) err = call_once(c, comm, dt, op, scratch);
  if (!err && mode == CB_PIPELINED) {
    if (every < 1) every = 1;
    err = MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters && !err; i++) {
      err = call_once(c, comm, dt, op, scratch);
      if ((i + 1) % every == 0 || i + 1 == iters) out[i / every] = (MPI_Wtime() - t0) * 1e6;
      if (progress) *progress = i + 1;
    }
    if (!err) err = call_once(c, comm, dt, op, scratch);
  } else if (!err) {
    for (int i = -1; i <= iters && !err; i++) {
      err = MPI_Barrier(comm);
      double t0 = MPI_Wtime();
      if (!err) err = call_once(c, comm, dt, op, scratch);
      double us = (MPI_Wtime() - t0) * 1e6;
      if (i >= 0 && i < iters) {
        out[i] = us;
        if (progress) *progress = i + 1;
      }
    }
  }
  free(scratch);
  return err;
}

#ifdef CB_MAIN
/* A buffer as OSU allocates one (page-aligned, ordinary pages: no madvise for huge pages,
 * which commbench turns off in numpy too), written so every page is real memory. */
static void *buffer(size_t bytes, int fill) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes ? bytes : 1)) return NULL;
  memset(p, fill, bytes);
  return p;
}

/* The standalone reference: cloop POINTS_FILE MODE ITERS WARMUP
 *
 * POINTS_FILE (written by commbench.kernels.native.write_points): int64 little-endian
 * words: nranks, npoints, then per point: kind, size_bytes, elem_bytes, and for
 * CB_ALLTOALLV the nranks x nranks byte matrix. Float32 sum for reductions, bytes otherwise.
 * Prints, from rank 0, one line per point: size_bytes mean_us_over_ranks max_us_over_ranks.
 */
static int64_t *read_words(const char *path, size_t *n) {
  FILE *fh = fopen(path, "rb");
  if (!fh) return NULL;
  fseek(fh, 0, SEEK_END);
  long len = ftell(fh);
  fseek(fh, 0, SEEK_SET);
  int64_t *w = malloc(len > 0 ? (size_t)len : 1);
  *n = fread(w, sizeof(int64_t), (size_t)len / sizeof(int64_t), fh);
  fclose(fh);
  return w;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 5) {
    if (!rank) fprintf(stderr, "usage: %s POINTS_FILE pipelined|latency ITERS WARMUP\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int mode = strcmp(argv[2], "latency") == 0 ? CB_LATENCY : CB_PIPELINED;
  int iters = atoi(argv[3]), warmup = atoi(argv[4]);
  size_t nw = 0;
  int64_t *w = read_words(argv[1], &nw);
  if (!w || nw < 2 || w[0] != size) {
    if (!rank) fprintf(stderr, "%s: cannot read %s for %d ranks\n", argv[0], argv[1], size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  size_t at = 2;
  double *out = malloc(sizeof(double) * (size_t)iters);
  for (int64_t p = 0; p < w[1]; p++) {
    cb_call c;
    memset(&c, 0, sizeof c);
    c.kind = (int)w[at];
    int64_t bytes = w[at + 1], elem = w[at + 2];
    at += 3;
    c.comm = MPI_Comm_c2f(MPI_COMM_WORLD);
    size_t sbytes = (size_t)bytes, rbytes = (size_t)bytes;
    int *v = NULL;
    if (c.kind == CB_ALLREDUCE) {
      c.dtype = MPI_Type_c2f(MPI_FLOAT);
      c.op = MPI_Op_c2f(MPI_SUM);
      c.count = (int)(bytes / elem);
    } else {
      c.dtype = MPI_Type_c2f(MPI_BYTE);
      if (c.kind == CB_ALLTOALL) {
        c.count = (int)(bytes / size / elem * elem);
        sbytes = rbytes = (size_t)c.count * size;
      } else if (c.kind == CB_ALLTOALLV) {
        v = malloc(sizeof(int) * 4 * (size_t)size);
        c.scounts = v, c.sdispls = v + size, c.rcounts = v + 2 * size, c.rdispls = v + 3 * size;
        sbytes = rbytes = 0;
        for (int q = 0; q < size; q++) {
          v[q] = (int)w[at + (size_t)rank * size + q];
          v[2 * size + q] = (int)w[at + (size_t)q * size + rank];
          v[size + q] = (int)sbytes, v[3 * size + q] = (int)rbytes;
          sbytes += v[q], rbytes += v[2 * size + q];
        }
        at += (size_t)size * size;
      }
    }
    c.send = buffer(sbytes, 1);
    c.recv = buffer(rbytes, 0);
    if (!c.send || !c.recv) MPI_Abort(MPI_COMM_WORLD, 4);
    int err = cb_time(&c, iters, warmup, mode, iters, out, NULL);
    if (err) MPI_Abort(MPI_COMM_WORLD, 3);
    double mine = 0;
    if (mode == CB_PIPELINED) mine = out[0] / iters;
    else {
      for (int i = 0; i < iters; i++) mine += out[i];
      mine /= iters;
    }
    double sum = 0, max = 0;
    MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (!rank) printf("%lld %.4f %.4f\n", (long long)bytes, sum / size, max);
    fflush(stdout);
    free(c.send), free(c.recv), free(v);
  }
  free(out), free(w);
  MPI_Finalize();
  return 0;
}
#endif
