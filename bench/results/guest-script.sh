exec python3 /work/main/bench/matrix/guest.py /work/main/bench/results/plan.json /work/main/bench/results
