python3 - <<'PY'
import ctypes, os
def show(tag):
    m = {}
    for l in open("/proc/self/maps"):
        if "/dev/nvidia" in l:
            p = l.split()[-1]
            a,b = l.split()[0].split("-")
            m.setdefault(p,[0,0]); m[p][0]+=1; m[p][1]+= (int(b,16)-int(a,16))>>10
    print(tag, "maps(count,KiB)", m)
n = ctypes.CDLL("libnvidia-ml.so.1"); n.nvmlInit_v2()
h = ctypes.c_void_p(); n.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
show("nvml")
c = ctypes.CDLL("libcuda.so.1"); c.cuInit(0); show("cuInit")
d = ctypes.c_int(); c.cuDeviceGet(ctypes.byref(d), 0)
ctx = ctypes.c_void_p(); print("ctx", c.cuCtxCreate_v2(ctypes.byref(ctx), 0, d)); show("ctx")
p = ctypes.c_ulonglong(); print("alloc", c.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1<<30))); show("alloc1G")
PY
