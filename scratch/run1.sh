set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $L/gpu.txt
A="python3 benchmarks/attention.py --tokens 16384 --dtypes fp16 --backends cudnn --warmup 25 --rep 100"
step() { name=$1; shift; s=$(date +%s); timeout ${T:-300} "$@" > $L/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s)-s ))s" | tee -a $L/steps.txt; tar czf $OUT/logs.tgz -C /tmp logs; }
if [ "$1" = bench ]; then
T=200 step d128_base $A --head-dims 128 --seqs 4096,8192,16384
T=200 step d128_3_64_2 $A --head-dims 128 --seqs 4096,8192,16384 --consumers 128:3 --schedule block_n=64,num_stages=2,unroll=1
T=200 step d128_3_80_2 $A --head-dims 128 --seqs 4096,8192,16384 --consumers 128:3 --schedule block_n=80,num_stages=2,unroll=1
T=200 step d128_3_64_3 $A --head-dims 128 --seqs 4096,8192,16384 --consumers 128:3 --schedule block_n=64,num_stages=3,unroll=1
T=300 step short_2wg $A --head-dims 64,128 --seqs 512,1024,2048 --persistent --persistent-schedules all
T=300 step short_3wg $A --head-dims 64,128 --seqs 512,1024,2048 --persistent --persistent-schedules all --persistent-consumers 64:3 --persistent-consumers 128:3
fi
if [ "$1" = tests ]; then
T=200 step tests_att python3 -m pytest -q -m gpu --timeout 300 tests/ops/test_attention_gpu.py -k "persistent or three" -p no:cacheprovider
T=400 step tests_mm python3 -m pytest -q -m gpu -n 8 --timeout 300 tests/ops/test_matmul_gpu.py tests/ops/test_split_gemm_gpu.py -p no:cacheprovider
fi
for f in $L/*.log; do echo "== $f"; grep -E "^\||TFLOP|passed|failed|WRONG|Error" $f | tail -40; done
cat $L/steps.txt
