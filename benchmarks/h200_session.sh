#!/usr/bin/env bash
# One batch on a Hopper machine: the GPU tests, the main job and the benchmarks, each step's log under $OUT (or
# ./h200-logs), then a short table of what passed and how long each step took. Steps run in the order given:
#
#   bash benchmarks/h200_session.sh STEP ...   (default: gpu-tests main tutorial launch matmul)
#
# Steps: gpu-tests, main, tutorial, launch, matmul, schedules (V3's depths and tiles), v6, v7 (every schedule), timeline
# (the instrumentation's cost and V3's timelines), timeline-cli, v7-timeline, gemm (ops.matmul's suite), tune-defaults
# (tunes the suite's shapes and writes the shipped defaults), tune-small-m (the same for a linear layer's small M),
# tune-large-m (the same for its M of 1024 to 8192, the tile walk), host-cost (benchmarks/host_cost.py: an eager call's
# host time against torch's, with a profile), llm (benchmarks/llm_shapes.py), torch-kernels
# (benchmarks/torch_kernels.py: the kernels cuBLAS and cuDNN run at llm_shapes' middle M and in attention's training
# step, beside ours), families (benchmarks/gemm_families.py: the tile walk against the split family), split-tests (the
# split family's GPU tests), ops-tests, stream-k-tests (flags and the stream-K schedules), stream-k (stream-K against
# whole tiles, cuBLAS beside), attention, attention-short (FlashAttention-3's short sequences, the persistent kernel
# beside), attention-grid (FlashAttention-3's whole grid through ops.attention, fp16 and bf16), attention-tests,
# grouped-tests (ops.grouped_matmul's GPU tests), grouped (benchmarks/grouped.py), grouped-sweep (the same, every
# schedule of the grouped kernel timed too), grouped-experts (benchmarks/grouped_experts.py: one expert's product, dense
# and grouped among 1, 8 and 64 experts, graphed too), decode (benchmarks/attention_decode.py at batch 1 and 32),
# decode-tests (the split-KV and bound-launch GPU tests), timeline-tests (the timeline's GPU tests), paged (paged decode
# at pages 16 and 64, checked and not, beside dense decode and SDPA), decode-targets (the decode targets' points, dense
# and paged), decode-splits (batch-1 decode at 16, 24 and 32 key splits), paged-tests (ops.attention_paged's and
# ops.attention_varlen's GPU tests, its packed backward's too), varlen (benchmarks/attention_varlen.py), varlen-backward
# (the same, forward + backward: the packed backward against the dense one), batched-tests (batched ops.matmul's GPU
# tests), batched (benchmarks/batched.py: its one launch against torch.bmm and the per-batch loop), decode-fold
# (benchmarks/decode_fold.py: split-KV decode's kernel time with and without its fold, graphed, SDPA beside),
# attention-timeline (benchmarks/attention_timeline.py: GPU timelines of the persistent kernel at seq 512).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-h200-logs}"
mkdir -p "$out"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(gpu-tests main tutorial launch matmul)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
python3 -c "import torch, triton, numpy, ml_dtypes; from cuda import bindings; print('torch', torch.__version__, \
'triton', triton.__version__, 'numpy', numpy.__version__, 'ml_dtypes', ml_dtypes.__version__, 'cuda-bindings', \
bindings.__version__)" | tee -a "$out/gpu.txt"
# benchmarks/gemm.py's shapes; shapes of one size bucket share a winner, tuned at the first (8192^3 here)
SUITE=2048x2048x2048,4096x4096x4096,8192x8192x8192,8000x8000x8000,8192x8192x8056,16384x16384x8192
SUITE=$SUITE,8192x8192x1024,4096x14336x4096,4096x4096x14336,16384x4096x4096
# A linear layer's small M (the split family) against Llama-sized weights N x K: the buckets llm_shapes.py reads
llm_shapes() {  # MxNxK for each M given, against the five weights
  local list="" m nk
  for m in "$@"; do for nk in 4096x4096 14336x4096 4096x14336 6144x4096 1024x4096; do
    list="$list${list:+,}${m}x${nk}"; done; done
  echo "$list"
}
SMALL_M=$(llm_shapes 1 8 16 32 64 128 256 512)
LARGE_M=$(llm_shapes 1024 2048 8192)  # ... and its M of 1024 to 8192 (the tile walk)
# Tunes the 16-bit dtypes at the shapes given, writes the shipped defaults and copies them under $out.
tune_16_bit() {
  cmd=(bash -c "for d in bfloat16 float16; do python3 -m warpspec.cli tune --dtype \$d --runs 30 --write-defaults \
                --shapes $1 || exit; done; cp src/warpspec/ops/defaults.json '$out/defaults.json'")
}
summary=()
for step in "${steps[@]}"; do
  case "$step" in
    # The GPU suite compiles hundreds of kernels: pytest-xdist (on the GPU machine's image) spreads the builds over
    # the CPUs, and pytest-timeout ends a test that hangs instead of the whole step (its thread method: a test stuck
    # in a driver call never sees a signal; the worker is ended and replaced).
    gpu-tests) cmd=(python3 -m pytest -q -m gpu tests -p no:cacheprovider --durations 25)
               python3 -c "import xdist, pytest_timeout" 2>/dev/null &&
                 cmd+=(-n 14 --dist worksteal --timeout 300 --timeout-method thread -rfE) ;;
    main) cmd=(python3 examples/main.py) ;;
    tutorial) cmd=(python3 benchmarks/tutorial.py) ;;
    launch) cmd=(python3 benchmarks/launch.py --breakdown --json "$out/launch.json") ;;
    matmul) cmd=(python3 benchmarks/matmul.py --schedules quick) ;;
    v6) cmd=(python3 benchmarks/every_schedule.py matmul_v6:MatmulWGMMAV6 --json "$out/v6_8192.json") ;;
    v7) cmd=(python3 benchmarks/every_schedule.py matmul_v7:MatmulWGMMAV7 --json "$out/v7_8192.json") ;;
    # One archive of the traces, charts and summaries (a run hands back only a few files)
    timeline) cmd=(bash -c "python3 benchmarks/profile_overhead.py --out /tmp/prof --json '$out/profile.json'; status=\$?; \
                            tar czf '$out/prof.tgz' -C /tmp prof; exit \$status") ;;
    timeline-cli) cmd=(python3 -m warpspec.cli timeline examples/matmul_v3.py:MatmulWGMMAV3 m_size=2048 n_size=2048
                       k_size=2048 --schedule num_stages=2,block_m=128,block_n=128,block_k=64 --backend cuda
                       --out /tmp/timeline-cli) ;;
    v7-timeline) cmd=(python3 -m warpspec.cli timeline examples/matmul_v7.py:MatmulWGMMAV7 m_size=8192 n_size=8192
                      k_size=8192 --schedule num_stages=4,block_m=128,block_n=256,epilogue_n=64 --backend cuda
                      --out /tmp/v7-timeline) ;;
    gemm) cmd=(python3 benchmarks/gemm.py --no-tune --json "$out/gemm.json") ;;
    tune-defaults) cmd=(bash -c "for d in float16 bfloat16; do python3 -m warpspec.cli tune --dtype \$d --runs 30 \
                        --write-defaults --shapes $SUITE || exit; done; python3 -m warpspec.cli tune --runs 30 \
                        --dtype float8_e4m3 --write-defaults --shapes 4096x14336x4096,8192x8192x8192 || exit; \
                        cp src/warpspec/ops/defaults.json '$out/defaults.json'") ;;
    tune-small-m) tune_16_bit "$SMALL_M" ;;
    tune-large-m) tune_16_bit "$LARGE_M" ;;
    host-cost) cmd=(python3 benchmarks/host_cost.py --profile 2000 --json "$out/host_cost.json") ;;
    llm) cmd=(python3 benchmarks/llm_shapes.py --no-tune --json "$out/llm.json") ;;
    torch-kernels) cmd=(python3 benchmarks/torch_kernels.py --attention --json "$out/torch_kernels.json") ;;
    families) cmd=(python3 benchmarks/gemm_families.py --json "$out/families.json") ;;
    split-tests) cmd=(python3 -m pytest -q -m gpu tests/ops/test_split_gemm_gpu.py -p no:cacheprovider)
                 python3 -c "import xdist" 2>/dev/null && cmd+=(-n 8) ;;
    ops-tests) cmd=(python3 -m pytest -q -x -m gpu tests/ops/test_matmul_gpu.py -p no:cacheprovider) ;;
    stream-k-tests) cmd=(python3 -m pytest -q -m gpu tests/isa/test_flag_gpu.py tests/ops/test_matmul_gpu.py
                         -k "flag or stream_k or splits" -p no:cacheprovider) ;;
    stream-k) cmd=(python3 benchmarks/stream_k.py --json "$out/stream_k.json") ;;
    attention) cmd=(python3 benchmarks/attention.py --head-dims 64,128,256 --seqs 8192 --causal both
                    --dtypes fp16,bf16 --json "$out/attention.json") ;;
    attention-short) cmd=(python3 benchmarks/attention.py --tokens 16384 --seqs 512,1024,2048 --head-dims 64,128,256
                          --causal both --dtypes fp16 --persistent --persistent-schedules all
                          --json "$out/attention_short.json") ;;
    attention-grid) cmd=(python3 benchmarks/attention.py --api --tokens 16384 --seqs 512,1024,2048,4096,8192,16384
                         --head-dims 64,128,256 --causal both --dtypes fp16,bf16 --backends cudnn --warmup 25
                         --rep 100 --json "$out/attention_grid.json") ;;
    attention-tests) cmd=(python3 -m pytest -q -x -m gpu tests/ops/test_attention_gpu.py -p no:cacheprovider) ;;
    decode) cmd=(python3 benchmarks/attention_decode.py --batches 1,32 --seq-ks 8192,32768 --seq-qs 1,4 --warmup 10
                 --rep 40 --json "$out/decode.json") ;;
    decode-tests) cmd=(python3 -m pytest -q -m gpu tests/ops/test_attention_decode_gpu.py -p no:cacheprovider) ;;
    # The decode targets' points: the two calls that read >= 256 MB of K and V (batch 32 x 8192, batch 1 x 131072) and
    # batch 1 x 8192, S_q 1 and 4, dense and paged (pages 16 and 64), SDPA's best beside each.
    decode-targets) cmd=(python3 benchmarks/attention_decode.py --batches 1,32 --seq-ks 8192,131072 --seq-qs 1,4
                         --pages 16,64 --max-gb 10 --warmup 10 --rep 40 --json "$out/decode_targets.json") ;;
    # Batch 1 at the shipped MAX_SPLITS (16) and at 24 and 32 (two blocks per SM): one block per SM left the H200's
    # consumers the bound at 131072 keys (2026-12-04), before the fold loaded its partials together.
    decode-splits) cmd=(bash -c "for s in 16 24 32; do python3 benchmarks/attention_decode.py --batches 1 \
                        --seq-ks 8192,32768,131072 --seq-qs 1 --max-splits \$s --warmup 10 --rep 40 \
                        --json '$out/decode_splits_'\$s.json || exit; done") ;;
    paged) cmd=(python3 benchmarks/attention_decode.py --batches 1,32 --seq-ks 8192,32768,131072 --seq-qs 1
                --pages 16,64 --kernels --max-gb 10 --warmup 10 --rep 40 --json "$out/paged.json") ;;
    paged-tests) cmd=(python3 -m pytest -q -m gpu tests/ops/test_attention_paged_decode.py
                      tests/ops/test_attention_varlen_paged.py tests/ops/test_attention_varlen_backward_gpu.py
                      -p no:cacheprovider) ;;
    varlen) cmd=(python3 benchmarks/attention_varlen.py --json "$out/varlen.json") ;;
    varlen-backward) cmd=(python3 benchmarks/attention_varlen.py --backward --json "$out/varlen_backward.json") ;;
    timeline-tests) cmd=(python3 -m pytest -q -m gpu tests/timeline -p no:cacheprovider) ;;
    grouped-tests) cmd=(python3 -m pytest -q -m gpu tests/ops/test_grouped_matmul_gpu.py -p no:cacheprovider) ;;
    grouped) cmd=(python3 benchmarks/grouped.py --json "$out/grouped.json") ;;
    grouped-sweep) cmd=(python3 benchmarks/grouped.py --sweep --json "$out/grouped_sweep.json") ;;
    grouped-experts) cmd=(python3 benchmarks/grouped_experts.py --profile "$out/grouped-experts-timelines") ;;
    batched-tests) cmd=(python3 -m pytest -q -m gpu tests/ops/test_matmul_batched_gpu.py -p no:cacheprovider) ;;
    batched) cmd=(python3 benchmarks/batched.py --json "$out/batched.json") ;;
    decode-fold) cmd=(python3 benchmarks/decode_fold.py --fold-widths 4,8,16) ;;
    attention-timeline) cmd=(python3 benchmarks/attention_timeline.py --out "$out/attention-timeline") ;;
    schedules) cmd=(python3 benchmarks/v3_schedules.py --json "$out/v3_8192.json") ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "=== $step: ${cmd[*]}"
  started=$(date +%s)
  log="$out/$step.log"  # a step given twice keeps both logs: gpu-tests.log, gpu-tests-2.log
  n=2
  while [ -e "$log" ]; do log="$out/$step-$n.log"; n=$((n + 1)); done
  "${cmd[@]}" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  summary+=("$(printf '%-10s exit %-3s %5ss  %s' "$step" "$status" "$(( $(date +%s) - started ))" \
    "$(grep -E 'passed|failed|OK|TFLOP' "$log" | tail -1 | cut -c1-90)")")
done
echo "=== summary"
printf '%s\n' "${summary[@]}"
