#!/usr/bin/env bash
# Instructions per post_send (1-SGE RDMA WRITE) and per poll (one CQE) of the driver's data
# path, counted by callgrind on the stepped sim.
#
# Builds driver/benches/callgrind_hot_path.rs for baseline x86-64 (valgrind 3.19 cannot decode
# AVX-512), then runs it under callgrind:
#   post: --toggle-collect on bypass_measured_post, and on the sim backend's write64/write_bf,
#         which are only ever called from inside it: entering them toggles collection off, so
#         what is counted is the driver's work (WQE, barriers, DBR, the doorbell call itself)
#         and not the simulated device behind the MMIO (on VFIO that is one store);
#   poll: --toggle-collect on bypass_measured_poll.
# Targets: <= 60 per post, <= 40 per poll. The sim's QP uses BlueFlame (1-SGE WRITE = 3 DS, one
# 64-byte block): the counted post ends in one `write_bf` call (its argument setup and the call
# are counted, its body is not).
#
# A third run counts Cq::poll with a 16-entry array (one consumer-index update per call, as
# ibv_poll_cq with a WC array), per CQE, for comparison with poll_one.
#
# Then the specialised paths (rdma-core's extended API), same counting:
#   post_write: Qp::post_write(wr_id, sge, remote, flags) (ibv_wr_start/rdma_write/set_sge/complete),
#               the SGE and remote address passed by value as an application passes them; its
#               error is the 8-byte PostRefused, returned in registers. The SQ-space test takes
#               a credit (one decrement); the published tail is read once per refill, which the
#               count includes, amortised;
#   poll ext:   Cq::start_poll, wr_id + status read, guard dropped (ibv_start_poll/end_poll);
#   poll ext x16: start_poll + next_poll up to 16 CQEs, one end_poll;
#   post_write x64: a WriteBatch of 64 WRITEs, one doorbell (ibv_wr_start, 64 x rdma_write +
#                   set_sge, ibv_wr_complete), per WQE;
#   poll ext, 2 QPs alternating: start_poll as above, with two QPs on the CQ whose WRITEs
#                   alternate, so that no CQE is of the QP before it (the cold path: the
#                   cold step's table lookup, home slot then probing; the figures above are
#                   the cache hits).
#
# Usage: scripts/callgrind.sh [rounds]   (64 posts and polls per round; default 32)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-32}"
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/callgrind}"
# The build log below is written next to the target directory: make sure its parent exists
# (a fresh checkout has no target/, and the redirect would fail before cargo ran).
mkdir -p "$CARGO_TARGET_DIR"
RUSTFLAGS="-C target-cpu=x86-64 -g" cargo bench -p bypass-driver --bench callgrind_hot_path --no-run \
  --message-format=json 2>/dev/null >"$CARGO_TARGET_DIR.build.json" || {
  RUSTFLAGS="-C target-cpu=x86-64 -g" cargo bench -p bypass-driver --bench callgrind_hot_path --no-run; exit 1; }
bin="$(grep -o '"executable":"[^"]*callgrind_hot_path[^"]*"' "$CARGO_TARGET_DIR.build.json" | tail -1 | cut -d'"' -f4)"
[ -x "$bin" ] || { echo "bench binary not found" >&2; exit 1; }

# CALLGRIND_KEEP=dir keeps the callgrind outputs (post.out, poll.out) there for inspection.
if [ -n "${CALLGRIND_KEEP:-}" ]; then
  out="$CALLGRIND_KEEP"; mkdir -p "$out"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi

count() { # $1 = output file: the collected instruction total
  grep '^summary:' "$1" | awk '{print $2}'
}

counts="$("$bin" "$rounds")"
posts="$(echo "$counts" | awk '{print $2}')"
polls="$(echo "$counts" | awk '{print $4}')"

# cg post|poll NAME FUNCTION [MODE]: runs the bench (in MODE) under callgrind counting only
# FUNCTION, into $out/NAME.out. For a post, the sim backend's write64/write_bf are toggled off
# too: entered only from inside FUNCTION, they switch collection off while the simulated device
# handles the doorbell (on VFIO that is the stores themselves).
cg() {
  local kind=$1 name=$2 fn=$3 mode=${4:-}
  local sim=()
  if [ "$kind" = post ]; then
    sim=(--toggle-collect='*SimBackend as bypass_seam::mmio::Mmio>::write64*'
         --toggle-collect='*SimBackend as bypass_seam::mmio::Mmio>::write_bf*')
  fi
  # shellcheck disable=SC2086 # MODE is one word or nothing
  valgrind --tool=callgrind --callgrind-out-file="$out/$name.out" --collect-atstart=no \
    --toggle-collect="$fn" "${sim[@]}" "$bin" "$rounds" $mode >/dev/null 2>"$out/$name.log"
}

cg post post bypass_measured_post
cg poll poll bypass_measured_poll

batch_counts="$("$bin" "$rounds" batch)"
batch_cqes="$(echo "$batch_counts" | awk '{print $4}')"
batch_calls="$(echo "$batch_counts" | awk '{print $6}')"
cg poll poll_batch bypass_measured_poll_batch batch

ext_counts="$("$bin" "$rounds" ext)"
ext_posts="$(echo "$ext_counts" | awk '{print $2}')"
ext_polls="$(echo "$ext_counts" | awk '{print $4}')"
cg post post_write bypass_measured_post_write ext
cg poll poll_ext bypass_measured_poll_ext ext
eb_counts="$("$bin" "$rounds" ext-batch)"
eb_cqes="$(echo "$eb_counts" | awk '{print $4}')"
eb_calls="$(echo "$eb_counts" | awk '{print $6}')"
eb_posts="$(echo "$eb_counts" | awk '{print $2}')"
eb_batches="$(echo "$eb_counts" | awk '{print $8}')"
cg post post_write_batch bypass_measured_post_write_batch ext-batch
cg poll poll_ext_batch bypass_measured_poll_ext_batch ext-batch
two_counts="$("$bin" "$rounds" ext-2qp)"
two_polls="$(echo "$two_counts" | awk '{print $4}')"
cg poll poll_ext_2qp bypass_measured_poll_ext ext-2qp

post_ir="$(count "$out/post.out")"
batch_ir="$(count "$out/poll_batch.out")"
poll_ir="$(count "$out/poll.out")"
# Every measured poll returns a CQE (the bench makes exactly one per signalled WRITE and
# stops if a measured poll finds none), so these are full polls only.
awk -v p="$post_ir" -v n="$posts" -v q="$poll_ir" -v m="$polls" 'BEGIN {
  printf "post_send: %d instructions / %d posts = %.1f per post (target <= 60)\n", p, n, p / n;
  printf "poll:      %d instructions / %d polls, each returning a CQE = %.1f per poll (target <= 40)\n", q, m, q / m;
}'
awk -v b="$batch_ir" -v c="$batch_cqes" -v k="$batch_calls" 'BEGIN {
  printf "poll x16:  %d instructions / %d CQEs in %d calls of Cq::poll(&mut [_; 16]) = %.1f per CQE (for comparison)\n", b, c, k, b / c;
}'
pw_ir="$(count "$out/post_write.out")"
pe_ir="$(count "$out/poll_ext.out")"
eb_ir="$(count "$out/poll_ext_batch.out")"
pb_ir="$(count "$out/post_write_batch.out")"
awk -v p="$pw_ir" -v n="$ext_posts" -v q="$pe_ir" -v m="$ext_polls" \
    -v b="$eb_ir" -v c="$eb_cqes" -v k="$eb_calls" 'BEGIN {
  printf "post_write:    %d instructions / %d posts = %.1f per post (target <= 60)\n", p, n, p / n;
  printf "poll ext:      %d instructions / %d polls, each returning a CQE = %.1f per poll (target <= 40)\n", q, m, q / m;
  printf "poll ext x16:  %d instructions / %d CQEs in %d start_poll calls = %.1f per CQE\n", b, c, k, b / c;
}'
awk -v p="$pb_ir" -v n="$eb_posts" -v k="$eb_batches" 'BEGIN {
  printf "post_write x64: %d instructions / %d WRITEs in %d WriteBatches (one doorbell each) = %.1f per WQE\n", p, n, k, p / n;
}'
two_ir="$(count "$out/poll_ext_2qp.out")"
awk -v q="$two_ir" -v m="$two_polls" 'BEGIN {
  printf "poll ext, 2 QPs alternating: %d instructions / %d polls = %.1f per poll (every CQE misses the last-QP cache: the cold path)\n", q, m, q / m;
}'
if [ -n "${CALLGRIND_ANNOTATE:-}" ]; then
  callgrind_annotate "$out/post.out" | head -${CALLGRIND_LINES:-40}
  callgrind_annotate "$out/poll.out" | head -${CALLGRIND_LINES:-40}
  callgrind_annotate "$out/post_write.out" | head -${CALLGRIND_LINES:-40}
  callgrind_annotate "$out/poll_ext.out" | head -${CALLGRIND_LINES:-40}
fi
