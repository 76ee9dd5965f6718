//! The pump's own tests: its queue's lead, the zero-copy path between pipes, the copied
//! path to a file.

use super::*;

#[test]
fn the_queue_blocks_at_the_lead_until_drained() {
    let q = Arc::new(Queue::new());
    let drain = Arc::new(AtomicBool::new(false));
    assert!(q.push(vec![0; LEAD], &drain));
    let (q2, d2) = (q.clone(), drain.clone());
    let t = std::thread::spawn(move || q2.push(vec![1; 10], &d2));
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!t.is_finished(), "a full queue holds the reader back");
    drain.store(true, Ordering::SeqCst);
    assert!(t.join().unwrap());
    q.close();
    assert_eq!(q.pop().map(|c| c.len()), Some(LEAD));
    assert_eq!(q.pop(), Some(vec![1; 10]));
    assert_eq!(q.pop(), None);
}

/// The job's pipe passed through `read_stream` to `dst` (a pipe, or a file when not
/// `pipe_dst`) with a copy pipe read as vramdoc does: (what reached `dst`, the copy's
/// stdout frames joined, how the bytes went).
fn pass(data: Vec<u8>, pipe_dst: bool) -> (Vec<u8>, Vec<u8>, Moved) {
    let pipe_files = || {
        let (r, w) = pipe().unwrap();
        (File::from(r), File::from(w))
    };
    let (job_r, mut job_w) = pipe_files();
    let (mut copy_r, copy_w) = pipe_files();
    let writer = std::thread::spawn(move || job_w.write_all(&data).unwrap());
    let copy_reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut head = [0u8; 5];
        while copy_r.read_exact(&mut head).is_ok() {
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut b = vec![0u8; len];
            copy_r.read_exact(&mut b).unwrap();
            assert_eq!(head[0], Frame::Stdout as u8);
            all.extend_from_slice(&b);
        }
        all
    });
    let (dst_fd, dst_reader, file): (OwnedFd, _, Option<tempfile::NamedTempFile>) = if pipe_dst {
        let (mut r, w) = pipe_files();
        let t = std::thread::spawn(move || {
            let mut all = Vec::new();
            r.read_to_end(&mut all).unwrap();
            all
        });
        (w.into(), Some(t), None)
    } else {
        let f = tempfile::NamedTempFile::new().unwrap();
        (f.reopen().unwrap().into(), None, Some(f))
    };
    let copy = Arc::new(Copy {
        file: Mutex::new(Some(copy_w)),
    });
    let q = Arc::new(Queue::new());
    let drain = AtomicBool::new(false);
    let raw = dst_fd.as_raw_fd();
    let w = {
        let q = q.clone();
        std::thread::spawn(move || write_stream(raw, &q))
    };
    let moved = read_stream(job_r, raw, Frame::Stdout, &copy, &q, &drain);
    w.join().unwrap();
    writer.join().unwrap();
    copy.close();
    drop(dst_fd);
    let got = match (dst_reader, file) {
        (Some(t), _) => t.join().unwrap(),
        (_, Some(f)) => std::fs::read(f.path()).unwrap(),
        _ => unreachable!(),
    };
    (got, copy_reader.join().unwrap(), moved)
}

fn numbered(bytes: usize) -> Vec<u8> {
    let mut v = Vec::new();
    let mut i = 0u64;
    while v.len() < bytes {
        v.extend_from_slice(format!("line {i} of the job\n").as_bytes());
        v.extend((0..=255u8).take((i % 7) as usize));
        i += 1;
    }
    v
}

#[test]
fn between_two_pipes_the_bytes_take_the_zero_copy_path_unchanged() {
    let data = numbered(3 << 20);
    let (got, copy, moved) = pass(data.clone(), true);
    assert!(got == data, "the terminal got every byte in order");
    assert!(copy == data, "so did the copy");
    // The first chunk always goes by `tee` (the terminal's pipe starts empty); later
    // ones may be queued where the reader was slow, never lost.
    assert!(moved.zero_copy > 0, "{moved:?}");
    assert_eq!(moved.zero_copy + moved.copied, data.len() as u64);
}

#[test]
fn to_a_file_the_bytes_are_read_and_written_as_before() {
    let data = numbered(1 << 20);
    let (got, copy, moved) = pass(data.clone(), false);
    assert!(got == data && copy == data);
    assert_eq!(
        moved,
        Moved {
            zero_copy: 0,
            copied: data.len() as u64
        }
    );
}
