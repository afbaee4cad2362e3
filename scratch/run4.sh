set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
A="python3 benchmarks/attention.py --tokens 16384 --dtypes fp16 --backends cudnn --warmup 25 --rep 100 --persistent --persistent-schedules all"
timeout 200 $A --head-dims 128 --seqs 4096,8192 --causal no --persistent-consumers 128:3 2>&1 | grep "x cuDNN"
timeout 150 $A --head-dims 64 --seqs 4096 --causal yes 2>&1 | grep "x cuDNN"
timeout 150 $A --head-dims 64 --seqs 4096 --causal yes --persistent-consumers 64:3 2>&1 | grep "x cuDNN"
