import sys, time, os
from specviz import lessons, load_model
from specviz.lessons.catalogue import LESSONS
t0 = time.perf_counter()
target = load_model("default")
print("load", round(time.perf_counter()-t0,1), flush=True)
which = sys.argv[1:] or [str(l.number) for l in LESSONS]
for lesson in LESSONS:
    if str(lesson.number) not in which: continue
    start = time.perf_counter(); n = 0
    for rec in lesson.run(target):
        n += 1
        print(f"  lesson {lesson.number} record {n} at {time.perf_counter()-start:.1f}s load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"lesson {lesson.number} {lesson.key}: {time.perf_counter()-start:.1f}s records {n} load {os.getloadavg()[0]:.1f}", flush=True)
