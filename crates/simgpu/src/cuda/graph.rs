//! Entry points: stream capture and CUDA graphs, as far as a framework's memory depends on
//! them. PyTorch asks every allocation whether its stream is capturing
//! (`cuStreamGetCaptureInfo`) and puts memory allocated during a capture into a private pool;
//! `torch.cuda.graphs` captures, instantiates and replays. Work submitted while a stream
//! captures is recorded into the graph, not run — as the driver does — so a captured
//! allocation charges the device once, at capture, and a replay allocates nothing. Launching
//! a graph runs nothing (no kernel computes on the simulator).

use super::*;

/// `CUstreamCaptureStatus`.
const CU_STREAM_CAPTURE_STATUS_NONE: c_uint = 0;
const CU_STREAM_CAPTURE_STATUS_ACTIVE: c_uint = 1;
/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`: a synchronising call on a capturing stream.
const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
/// `CUDA_ERROR_ILLEGAL_STATE`: ending a capture a stream never began.
const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;

/// A graph (from a capture or `cuGraphCreate`) or an instantiation of one.
pub(super) struct Graph {
    pub(super) ctx: usize,
    /// Set for an executable graph: the graph it was instantiated from.
    pub(super) exec_of: Option<usize>,
    pub(super) capture_id: u64,
}

thread_local! {
    /// This thread's stream-capture interaction mode (`cuThreadExchangeStreamCaptureMode`).
    static CAPTURE_MODE: std::cell::Cell<c_uint> = const { std::cell::Cell::new(0) };
}

impl Driver {
    /// The graph `stream` is capturing into.
    pub(super) fn capturing(&self, stream: CUstream) -> Option<usize> {
        self.streams.get(&(stream as usize)).and_then(|s| s.capture)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(stream: CUstream, _mode: c_uint) -> CUresult {
    with_driver("cuStreamBeginCapture_v2", |d| {
        let ctx = d.stream_ctx(stream)?;
        let st = d
            .streams
            .get(&(stream as usize))
            // The legacy default stream cannot be captured.
            .ok_or(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)?;
        if st.capture.is_some() {
            return Err(CUDA_ERROR_ILLEGAL_STATE);
        }
        let g = d.mint();
        d.graphs.insert(
            g,
            Graph {
                ctx,
                exec_of: None,
                capture_id: g as u64,
            },
        );
        if let Some(st) = d.streams.get_mut(&(stream as usize)) {
            st.capture = Some(g);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(stream: CUstream, graph: *mut usize) -> CUresult {
    with_driver("cuStreamEndCapture", |d| {
        nonnull(graph)?;
        let st = d
            .streams
            .get_mut(&(stream as usize))
            .ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        let g = st.capture.take().ok_or(CUDA_ERROR_ILLEGAL_STATE)?;
        out(graph, g)
    })
}

/// Every form (`cuStreamGetCaptureInfo`, `_v2`, `_v3`): the status and capture id come first;
/// the graph and its dependencies, where asked for, are the capture's graph and none.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3(
    stream: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut usize,
    deps: *mut *const c_void,
    edges: *mut *const c_void,
    num_deps: *mut usize,
) -> CUresult {
    with_driver("cuStreamGetCaptureInfo", |d| {
        d.stream_ctx(stream)?;
        let g = d.capturing(stream);
        out(
            status,
            if g.is_some() {
                CU_STREAM_CAPTURE_STATUS_ACTIVE
            } else {
                CU_STREAM_CAPTURE_STATUS_NONE
            },
        )?;
        let set = |p: *mut u64, v: u64| if p.is_null() { Ok(()) } else { out(p, v) };
        let cid = g
            .and_then(|g| d.graphs.get(&g))
            .map_or(0, |gr| gr.capture_id);
        set(id, cid)?;
        if g.is_some() {
            if !graph.is_null() {
                out(graph, g.unwrap_or(0))?;
            }
            for p in [deps, edges] {
                if !p.is_null() {
                    out(p, std::ptr::null())?;
                }
            }
            if !num_deps.is_null() {
                out(num_deps, 0)?;
            }
        }
        Ok(())
    })
}

/// The CUDA 11.3 form: (stream, status, id, graph, deps, num_deps).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    stream: CUstream,
    status: *mut c_uint,
    id: *mut u64,
    graph: *mut usize,
    deps: *mut *const c_void,
    num_deps: *mut usize,
) -> CUresult {
    cuStreamGetCaptureInfo_v3(
        stream,
        status,
        id,
        graph,
        deps,
        std::ptr::null_mut(),
        num_deps,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo(
    stream: CUstream,
    status: *mut c_uint,
    id: *mut u64,
) -> CUresult {
    cuStreamGetCaptureInfo_v3(
        stream,
        status,
        id,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: CUstream, status: *mut c_uint) -> CUresult {
    cuStreamGetCaptureInfo(stream, status, std::ptr::null_mut())
}

#[no_mangle]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> CUresult {
    guard("cuThreadExchangeStreamCaptureMode", || {
        if mode.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        // SAFETY: checked non-null; the caller's in/out mode.
        let new = unsafe { *mode };
        if new > 2 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let old = CAPTURE_MODE.with(|m| m.replace(new));
        unsafe { *mode = old };
        CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(graph: *mut usize, _flags: c_uint) -> CUresult {
    with_driver("cuGraphCreate", |d| {
        nonnull(graph)?;
        let ctx = d.current()?;
        let g = d.mint();
        d.graphs.insert(
            g,
            Graph {
                ctx,
                exec_of: None,
                capture_id: 0,
            },
        );
        out(graph, g)
    })
}

fn instantiate(name: &str, exec: *mut usize, graph: usize) -> CUresult {
    with_driver(name, |d| {
        nonnull(exec)?;
        let g = d.graphs.get(&graph).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if g.exec_of.is_some() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ctx = g.ctx;
        let e = d.mint();
        d.graphs.insert(
            e,
            Graph {
                ctx,
                exec_of: Some(graph),
                capture_id: 0,
            },
        );
        out(exec, e)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut usize,
    graph: usize,
    _flags: u64,
) -> CUresult {
    instantiate("cuGraphInstantiateWithFlags", exec, graph)
}

/// `cuGraphInstantiateWithParams(exec, graph, params)`: the result is also written into the
/// params' `result_out` (CUDA_GRAPH_INSTANTIATE_SUCCESS, 0).
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(
    exec: *mut usize,
    graph: usize,
    params: *mut c_void,
) -> CUresult {
    let r = instantiate("cuGraphInstantiateWithParams", exec, graph);
    if r == CUDA_SUCCESS && !params.is_null() {
        // CUDA_GRAPH_INSTANTIATE_PARAMS: flags (u64), hUploadStream, hErrNode_out, result_out.
        // SAFETY: a non-null params points at that struct (cuda.h).
        unsafe { *((params as *mut u8).add(24) as *mut c_uint) = 0 };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: usize, stream: CUstream) -> CUresult {
    with_driver("cuGraphLaunch", |d| {
        let g = d.graphs.get(&exec).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if g.exec_of.is_none() {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        let ctx = d.stream_ctx(stream)?;
        d.check_device(d.contexts[&ctx].ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload(exec: usize, stream: CUstream) -> CUresult {
    with_driver("cuGraphUpload", |d| {
        d.graphs.get(&exec).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        d.stream_ctx(stream).map(|_| ())
    })
}

fn destroy_graph(name: &str, graph: usize, exec: bool) -> CUresult {
    with_driver(name, |d| match d.graphs.get(&graph) {
        Some(g) if g.exec_of.is_some() == exec => {
            d.graphs.remove(&graph);
            Ok(())
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: usize) -> CUresult {
    destroy_graph("cuGraphDestroy", graph, false)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: usize) -> CUresult {
    destroy_graph("cuGraphExecDestroy", exec, true)
}

/// The 10.0 and 11.0 form: (exec, graph, error node, log buffer, its size).
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate(
    exec: *mut usize,
    graph: usize,
    error_node: *mut usize,
    _log: *mut c_char,
    _log_size: usize,
) -> CUresult {
    let r = instantiate("cuGraphInstantiate", exec, graph);
    if !error_node.is_null() {
        // SAFETY: checked non-null; an output per cuda.h.
        unsafe { *error_node = 0 };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    exec: *mut usize,
    graph: usize,
    error_node: *mut usize,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    cuGraphInstantiate(exec, graph, error_node, log, log_size)
}

/// A graph's nodes: a captured graph records no nodes here (work ran at submission).
#[no_mangle]
pub unsafe extern "C" fn cuGraphGetNodes(
    graph: usize,
    nodes: *mut usize,
    count: *mut usize,
) -> CUresult {
    with_driver("cuGraphGetNodes", |d| {
        d.graphs.get(&graph).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        nonnull(count)?;
        let _ = nodes;
        out(count, 0)
    })
}

/// Node queries: no graph has nodes, so every node handle is unknown.
fn no_such_node(name: &str) -> CUresult {
    with_driver(name, |_| Err(CUDA_ERROR_INVALID_VALUE))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphNodeGetType(_node: usize, _kind: *mut c_uint) -> CUresult {
    no_such_node("cuGraphNodeGetType")
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams_v2(
    _node: usize,
    _params: *mut c_void,
) -> CUresult {
    no_such_node("cuGraphKernelNodeGetParams_v2")
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams(node: usize, params: *mut c_void) -> CUresult {
    cuGraphKernelNodeGetParams_v2(node, params)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(
    _exec: usize,
    _node: usize,
    _params: *const c_void,
) -> CUresult {
    no_such_node("cuGraphExecKernelNodeSetParams_v2")
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams(
    exec: usize,
    node: usize,
    params: *const c_void,
) -> CUresult {
    cuGraphExecKernelNodeSetParams_v2(exec, node, params)
}
