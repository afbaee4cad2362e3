set -u
export PYTHONUNBUFFERED=1
L=/tmp/logs3; mkdir -p $L
A="python3 benchmarks/attention.py --tokens 16384 --dtypes fp16 --backends cudnn --warmup 25 --rep 100 --head-dims 64,128 --seqs 512,1024,2048 --persistent --persistent-schedules all"
step() { name=$1; shift; s=$(date +%s); timeout ${T:-300} "$@" > $L/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s)-s ))s" | tee -a $L/steps.txt; tar czf $OUT/logs3.tgz -C /tmp logs3; }
PYTHONPATH=$PWD/scratch/base/src T=200 step before $A
PYTHONPATH=$PWD/src T=200 step after $A
PYTHONPATH=$PWD/scratch/base/src T=100 step before2 $A --causal yes
PYTHONPATH=$PWD/src T=100 step after2 $A --causal yes
for f in $L/before.log $L/after.log $L/before2.log $L/after2.log; do echo "== $f"; grep -E "x cuDNN" $f | sed 's/fp16 //; s/TFLOP\/s//; s/flash nan, //'; done
cat $L/steps.txt
