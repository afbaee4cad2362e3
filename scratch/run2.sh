set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
L=/tmp/logs2; mkdir -p $L
A="python3 benchmarks/attention.py --tokens 16384 --backends cudnn --warmup 25 --rep 100 --api"
step() { name=$1; shift; s=$(date +%s); timeout ${T:-300} "$@" > $L/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s)-s ))s" | tee -a $L/steps.txt; tar czf $OUT/logs2.tgz -C /tmp logs2; }
T=120 step api_d128 $A --head-dims 128 --seqs 4096,8192,16384 --dtypes fp16,bf16
T=100 step api_short $A --head-dims 64 --seqs 512,1024,2048 --dtypes fp16 --causal no
T=100 step bwd python3 benchmarks/attention_backward.py --head-dims 128 --seqs 8192 --dtypes bf16
T=250 step tests_att python3 -m pytest -q -m gpu -n 4 --timeout 300 tests/ops/test_attention_gpu.py -p no:cacheprovider
for f in $L/*.log; do echo "== $f"; grep -E "x cuDNN|passed|failed|WRONG|Error|µs|us " $f | tail -30; done
cat $L/steps.txt
