# 1. call_a's BERT NaN (2026-12-03f: policy always, the GPU shared with eleven fuzz processes, its memory nearly
# full): a hog process holds all but ~8 GB of the GPU and keeps its SMs busy while convergence.py runs Llama, then
# BERT twice, with Inductor's NaN asserts on (the first buffer that turns NaN names its kernel).
# 2. The model fuzz's first GPU run (tests/fuzz_models.py).
source benchmarks/device_setup.sh
cd /tmp/site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python -c "import torch, triton; print(torch.__version__, triton.__version__)"
timeout 300 python -c "
import torch, time
free = torch.cuda.mem_get_info()[0]
hold = torch.empty(int(free - 8 * 2**30), dtype=torch.uint8, device='cuda')
a = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16)
end = time.time() + 290
while time.time() < end:
    for _ in range(50): a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize(); time.sleep(0.01)
" &
hog=$!
sleep 10
for run in llama bert bert2; do
  model=${run%2}
  start=$SECONDS
  TORCHINDUCTOR_NAN_ASSERTS=1 timeout 125 python benchmarks/convergence.py --models $model --json $OUT/conv_$run.json > $OUT/conv_$run.log 2>&1
  echo "$run rc $? $((SECONDS - start)) s"
  grep "^|\|PASS\|FAIL\|not finite\|assert\|Error" $OUT/conv_$run.log | tail -8 | cut -c1-300
done
kill $hog 2>/dev/null; wait
timeout 165 python tests/fuzz_models.py --cases 600 --workers 12 --time-limit 115 > $OUT/fuzz_models.log 2>&1; echo "rc $?" >> $OUT/fuzz_models.log
grep -v "Warning\|warnings.warn\|cases, 0 wrong$" $OUT/fuzz_models.log | tail -40 | cut -c1-400
