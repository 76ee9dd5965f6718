#!/usr/bin/env python3
# Probe (real GPU only, not run by tests): which driver files a CUDA process and a child it
# forks hold (/proc/self/fd) and map (/proc/self/smaps), and how many of those mappings carry
# VmFlags `dc` (not copied on fork). Run as it was for docs/simulator.md ("Who holds memory
# through the device files"), on an H200, driver 580.159.04, 2026-11-28:
#   timeout 60 python3 scripts/probe-devfiles.py > log 2>&1; sleep 8; cat log
import collections as C,ctypes,os,subprocess as S,time
def fds():
 o=C.Counter()
 for f in os.listdir("/proc/self/fd"):
  try:t=os.readlink("/proc/self/fd/"+f)
  except OSError:continue
  if t.startswith("/dev/nvidia"):o[t]+=1
 return dict(o)
def maps():
 n,s,d=C.Counter(),C.Counter(),C.Counter();p=None
 for l in open("/proc/self/smaps"):
  q=l.split()
  if "-" in q[0] and len(q)>=5 and ":" in q[3]:
   p=q[5] if len(q)>=6 and q[5].startswith("/dev/nvidia") else None
   if p:a,b=q[0].split("-");n[p]+=1;s[p]+=int(b,16)-int(a,16)
  elif q[0]=="VmFlags:" and p and "dc" in q[1:]:d[p]+=1
 return {k:"%d maps %d KiB dc=%d"%(n[k],s[k]//1024,d[k]) for k in n}
def r(x):print(x,os.getpid(),fds(),maps(),flush=True)
c=ctypes.CDLL("libcuda.so.1");B=ctypes.byref
assert c.cuInit(0)==0;r("after-cuInit")
d=ctypes.c_int();assert c.cuDeviceGet(B(d),0)==0
x=ctypes.c_void_p();assert c.cuCtxCreate_v2(B(x),0,d)==0
p=ctypes.c_uint64();assert c.cuMemAlloc_v2(B(p),1<<30)==0
m=ctypes.c_uint64();assert c.cuMemAllocManaged(B(m),256<<20,1)==0
r("parent-ctx+1GiB+managed256MiB");par=os.getpid()
if os.fork()==0:
 r("child-after-fork")
 for _ in range(100):
  if os.getppid()!=par:break
  time.sleep(.1)
 time.sleep(1);r("child-after-parent-exit")
 for q in (["--query-compute-apps=pid,used_memory"],["--query-gpu=memory.used","-i","0"]):print("smi",S.run(["nvidia-smi"]+q+["--format=csv,noheader"],capture_output=True,text=True).stdout.strip(),flush=True)
 os._exit(0)
time.sleep(1);r("parent-after-fork");os._exit(0)
