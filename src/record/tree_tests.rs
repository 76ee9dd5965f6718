//! Unit tests of the job's process tree on real processes of this test binary.

use super::*;

#[test]
fn sees_children_and_grandchildren_and_their_exit() {
    // sh -> sleep (grandchild of the test process through sh).
    let mut child = std::process::Command::new("sh")
        .args(["-c", "sleep 30 & wait"])
        .spawn()
        .unwrap();
    let me = std::process::id();
    let mut tree = ProcessTree::new(me, false);
    let mut names = Vec::new();
    for _ in 0..100 {
        tree.refresh(1.0);
        names = tree.all().into_iter().filter_map(|t| t.name).collect();
        if names.iter().any(|n| n == "sleep") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(names.iter().any(|n| n == "sh"), "{names:?}");
    assert!(names.iter().any(|n| n == "sleep"), "{names:?}");
    let sleep_pid = tree
        .all()
        .into_iter()
        .find(|t| t.name.as_deref() == Some("sleep"))
        .unwrap()
        .pid;
    assert_eq!(tree.resolve(sleep_pid, 2.0).0, Some(sleep_pid));
    assert_eq!(tree.resolve(1, 2.0).0, None, "init is not in the tree");
    // A member in a nested namespace, reported by its inner PID 1.
    // (Other tests of this process start children too: use this test's own.)
    let mut nested = tree.all().into_iter().find(|t| t.pid == sleep_pid).unwrap();
    nested.pid = sleep_pid;
    nested.nspid = vec![sleep_pid, 1];
    tree.live.insert(sleep_pid, nested);
    assert_eq!(tree.resolve(1, 2.0).0, Some(sleep_pid), "NSpid match");
    unsafe { libc::kill(sleep_pid as i32, libc::SIGKILL) };
    let _ = child.wait();
    tree.refresh(3.0);
    let sh = child.id();
    assert!(tree
        .all()
        .iter()
        .filter(|t| t.pid == sh || t.pid == sleep_pid)
        .all(|t| t.end_ms == Some(3.0)));
}

/// Issue 39: a name read before a list first named the process (maybe a program it
/// exec'd away from) is not vouched for; one read then or later, or from its zombie, is.
#[test]
fn a_name_read_before_the_first_listing_is_unknown() {
    let tp = |name_ms: f64, listed_ms: Option<f64>, name_final: bool| TreeProcess {
        ppid: Some(1),
        name: Some("sh".into()),
        end_ms: Some(900.0),
        name_ms,
        name_final,
        listed_ms,
        ..TreeProcess::bare(10)
    };
    assert_eq!(tp(100.0, Some(500.0), false).known_name(), None);
    assert_eq!(tp(500.0, Some(500.0), false).known_name(), Some("sh"));
    assert_eq!(tp(100.0, Some(500.0), true).known_name(), Some("sh"));
    assert_eq!(tp(100.0, None, false).known_name(), Some("sh"));
}

/// A member reaped by its parent is ended at that time, once (a later refresh or a
/// second call changes nothing); a PID that is no member is left alone.
#[test]
fn a_reaped_member_ends_when_it_was_reaped() {
    let me = std::process::id();
    let mut tree = ProcessTree::new(me, true);
    tree.refresh(1.0);
    assert!(tree.live_pids().contains(&me), "the root, included");
    assert_eq!(
        tree.ended(me, 5.0),
        Some(TreeChange::Exited { pid: me, t_ms: 5.0 })
    );
    assert_eq!(tree.ended(me, 6.0), None, "ended once");
    assert!(tree
        .all()
        .iter()
        .any(|t| t.pid == me && t.end_ms == Some(5.0)));
    assert_eq!(tree.ended(u32::MAX, 7.0), None);
}

/// A process outside the root's tree that carries the job's variable is the job's, with
/// why; its child is the job's as a descendant; a process without it is not.
#[test]
fn a_process_carrying_the_job_s_variable_joins_with_its_descendants() {
    let token = format!("token-{}", std::process::id());
    let mut tree = ProcessTree::with_scope(Scope {
        env: vec![vec![("VRAMDOC_TREE_TEST".into(), token.clone())]],
        ..Scope::descendants(u32::MAX)
    });
    let mut with = std::process::Command::new("sh")
        .args(["-c", "tail -f /dev/null & wait"])
        .env("VRAMDOC_TREE_TEST", &token)
        .spawn()
        .unwrap();
    let mut without = std::process::Command::new("tail")
        .args(["-f", "/dev/null"])
        .spawn()
        .unwrap();
    let (sh, other) = (with.id(), without.id());
    let mut all = Vec::new();
    for _ in 0..200 {
        tree.refresh(1.0);
        all = tree.all();
        if all.iter().any(|t| t.name.as_deref() == Some("tail")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = without.kill();
    let _ = without.wait();
    let sleep = all
        .iter()
        .find(|t| t.name.as_deref() == Some("tail"))
        .cloned();
    if let Some(s) = &sleep {
        unsafe { libc::kill(s.pid as i32, libc::SIGKILL) };
    }
    let _ = with.wait();
    let me = all.iter().find(|t| t.pid == sh).expect("sh joined");
    assert_eq!(me.via.as_deref(), Some("environment VRAMDOC_TREE_TEST"));
    let sleep = sleep.expect("its child too (tail)");
    assert_eq!(sleep.ppid, Some(sh));
    assert_eq!(sleep.via, None, "a member's child is a descendant");
    assert!(all.iter().all(|t| t.pid != other), "{all:?}");
}

/// A member's GPU environment as the recording keeps it is scan's shape, read by the same
/// rules: values trimmed, Slurm's step list only when it names something (an empty
/// `SLURM_STEP_GPUS` does not hide the job's list), and what was read of its view kept.
#[test]
fn a_members_gpu_env_is_read_as_scan_reads_a_process() {
    let vars = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let tp = TreeProcess {
        ppid: Some(1),
        gpu_env: vars(&[
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID "),
            (
                "NVIDIA_VISIBLE_DEVICES",
                "/var/run/nvidia-container-devices",
            ),
            ("SLURM_STEP_GPUS", ""),
            ("SLURM_JOB_GPUS", "2"),
        ]),
        node_minors: Some(vec![1]),
        mounted_device_ids: Some(vec!["GPU-1".into()]),
        ..TreeProcess::bare(10)
    };
    let env = tp.gpu_env();
    let scan = crate::inventory::gpu_env_from_environ(&crate::host::Environ::from_bytes(
        b"CUDA_DEVICE_ORDER=PCI_BUS_ID \0NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices\0\
          SLURM_STEP_GPUS=\0SLURM_JOB_GPUS=2\0",
    ));
    assert_eq!(env.cuda_device_order.as_deref(), Some("PCI_BUS_ID"));
    assert_eq!(
        env.slurm_gpus,
        Some(("SLURM_JOB_GPUS".to_string(), "2".to_string()))
    );
    assert_eq!(env.mount_dir(), Some("/var/run/nvidia-container-devices"));
    assert_eq!(env.mounted_device_ids, Some(vec!["GPU-1".to_string()]));
    assert_eq!(env.node_minors, Some(vec![1]));
    assert_eq!(
        crate::model::GpuEnv {
            mounted_device_ids: None,
            node_minors: None,
            ..env
        },
        scan
    );
}
