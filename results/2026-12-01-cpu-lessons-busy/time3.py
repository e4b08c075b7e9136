import sys, time, os
import specviz; print(specviz.__file__, flush=True)
from specviz import load_model
from specviz.lessons.catalogue import LESSONS
from specviz.lessons.progress import progress_of
target = load_model("default")
for number in sys.argv[1:]:
    lesson = next(l for l in LESSONS if str(l.number) == number)
    start = time.perf_counter(); loads = []
    for rec in lesson.run(target):
        loads.append(os.getloadavg()[0])
        print(f"  lesson {number} at {time.perf_counter()-start:.1f}s: {progress_of(rec)} load {loads[-1]:.1f}", flush=True)
    print(f"lesson {number} {lesson.key}: {time.perf_counter()-start:.1f}s, load {min(loads):.1f}-{max(loads):.1f}", flush=True)
