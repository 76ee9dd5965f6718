//! A process's device set (issue 25): the GPUs it can use, decided from what it can open
//! before its environment. Its device files (`/proc/PID/root/dev/nvidia<minor>`: a
//! container runtime mounts only the chosen GPUs') and its v1 device cgroup give the GPUs
//! it can open; Slurm's `SLURM_STEP_GPUS` / `SLURM_JOB_GPUS` the GPUs it was given; its
//! `CUDA_VISIBLE_DEVICES` only narrows that set. Minor numbers are mapped to NVML indices
//! through each device's `nvmlDeviceGetMinorNumber` ([`GpuRef::minor`]): they follow the
//! kernel module's probe order, not NVML's PCI order (NVIDIA/nvidia-docker#1432, #376).
//! Whatever cannot be known stays unknown (`Err`): no finding depends on it.

use super::visibility::allowed_devices_over;
use crate::gpu::DeviceInfo;
use crate::inventory::{GpuEnv, CVD_UNSET};

/// One GPU as the device set needs it, at its NVML index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuRef {
    pub uuid: String,
    pub name: String,
    /// `nvmlDeviceGetMinorNumber`; `None`: not known.
    pub minor: Option<u32>,
}

impl GpuRef {
    pub fn of(d: &DeviceInfo) -> GpuRef {
        GpuRef {
            uuid: d.uuid.clone(),
            name: d.name.clone(),
            minor: d.minor,
        }
    }
}

/// The GPUs a process may use, and what that was decided from (evidence lines).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSet {
    /// NVML indices, ascending.
    pub allowed: Vec<u32>,
    /// `(label, value)` of each fact beyond `CUDA_VISIBLE_DEVICES` that decided it.
    pub basis: Vec<(String, String)>,
}

/// The NVML index of the GPU whose device file has minor `minor`; `None` when no GPU has
/// it, or some GPU's minor is not known (then none can be told).
pub fn index_of_minor(minor: u32, gpus: &[GpuRef]) -> Option<u32> {
    if gpus.iter().any(|g| g.minor.is_none()) {
        return None;
    }
    gpus.iter()
        .position(|g| g.minor == Some(minor))
        .map(|i| i as u32)
}

/// The GPUs the process can open, from its files, when that restricts it: the devices of
/// the `nvidia<minor>` files in its view of the device directory, within those its device
/// cgroup allows. `None`: not known, or every GPU. `on`: the GPUs NVML lists it on — a
/// view that leaves one out contradicts the driver, and is not used.
pub fn openable(env: Option<&GpuEnv>, gpus: &[GpuRef], on: &[u32]) -> Option<Vec<u32>> {
    let env = env?;
    let n = gpus.len() as u32;
    let mut set: Vec<u32> = (0..n).collect();
    for minors in [env.node_minors.as_ref(), env.cgroup_minors.as_ref()]
        .into_iter()
        .flatten()
    {
        let mut idx = Vec::new();
        for m in minors {
            match index_of_minor(*m, gpus) {
                Some(i) => idx.push(i),
                // nvidiactl's 255 in a device cgroup; a GPU this vantage does not see.
                None if gpus.iter().all(|g| g.minor.is_some()) => {}
                None => return None,
            }
        }
        set.retain(|i| idx.contains(i));
    }
    if set.len() == n as usize || !on.iter().all(|d| set.contains(d)) {
        return None;
    }
    Some(set)
}

/// The GPUs Slurm's variable names, NVML indices in each reading that names GPUs of this
/// machine: the device files' minor numbers (Slurm's `dev_num`, what its `gres_common.c`
/// wrote before it switched GPUs to their PCI enumeration order) and the GRES index in PCI
/// order (what later versions write: "GPUs … want it to match the order they enumerate on
/// the PCI bus, and this isn't always the same order as the device file names"). Where
/// minors follow NVML order both readings are one. `Err`: neither reading names GPUs here.
pub fn slurm_sets(var: &str, value: &str, gpus: &[GpuRef]) -> Result<Vec<Vec<u32>>, String> {
    let nums: Option<Vec<u32>> = value
        .split(',')
        .map(|t| t.trim().parse::<u32>().ok())
        .collect();
    let Some(nums) = nums.filter(|n| !n.is_empty()) else {
        return Err(format!("{var}={value}: not a list of GPU numbers"));
    };
    if gpus.iter().any(|g| g.minor.is_none()) {
        return Err(format!(
            "{var}={value} names minor numbers, and this driver did not say the GPUs' minors"
        ));
    }
    let mut sets: Vec<Vec<u32>> = Vec::new();
    let by_minor: Option<Vec<u32>> = nums.iter().map(|m| index_of_minor(*m, gpus)).collect();
    let by_index: Option<Vec<u32>> = nums
        .iter()
        .map(|i| (*i < gpus.len() as u32).then_some(*i))
        .collect();
    for mut s in [by_minor, by_index].into_iter().flatten() {
        s.sort_unstable();
        s.dedup();
        if !sets.contains(&s) {
            sets.push(s);
        }
    }
    if sets.is_empty() {
        return Err(format!("{var}={value} names no GPU of this machine"));
    }
    Ok(sets)
}

/// The device set of a process (see the module doc): `cvd` its `CUDA_VISIBLE_DEVICES` (or
/// `unset`), `env` the rest of what decides it, `gpus` by NVML index, `on` the GPUs NVML
/// lists it on. `Err` (why) when it cannot be known.
pub fn device_set(
    cvd: &str,
    env: Option<&GpuEnv>,
    gpus: &[GpuRef],
    in_container: bool,
    on: &[u32],
) -> Result<DeviceSet, String> {
    let pairs: Vec<(String, String)> = gpus
        .iter()
        .map(|g| (g.uuid.clone(), g.name.clone()))
        .collect();
    let open = openable(env, gpus, on);
    let mut basis = Vec::new();
    if let Some(o) = &open {
        basis.push((
            "GPUs it can open (its device files and device cgroup)".to_string(),
            super::evidence::gpus(o),
        ));
    }
    let by_env = allowed_devices_over(open.clone(), cvd, env, &pairs, in_container);
    let slurm = env.and_then(|e| e.slurm_gpus.as_ref());
    let Some((var, value)) = slurm.filter(|_| cvd != CVD_UNSET) else {
        return by_env.map(|allowed| DeviceSet { allowed, basis });
    };
    basis.push((var.clone(), value.clone()));
    let mut allowed: Vec<u32> = Vec::new();
    for s in slurm_sets(var, value, gpus)? {
        let s: Vec<u32> = match &open {
            Some(o) => s.into_iter().filter(|i| o.contains(i)).collect(),
            None => s,
        };
        // Slurm without ConstrainDevices: the job's CUDA_VISIBLE_DEVICES counts every GPU it
        // can open, and names GPUs of its allocation.
        if let Ok(g) = &by_env {
            if !g.is_empty() && g.iter().all(|i| s.contains(i)) {
                allowed.extend(g);
            }
        }
        // With ConstrainDevices (task/cgroup): it counts the allocated GPUs only, from 0.
        if let Ok(l) = allowed_devices_over(Some(s), cvd, env, &pairs, in_container) {
            allowed.extend(l);
        }
    }
    if allowed.is_empty() {
        return Err(format!(
            "CUDA_VISIBLE_DEVICES={cvd} names none of the GPUs {var}={value} gives it"
        ));
    }
    allowed.sort_unstable();
    allowed.dedup();
    Ok(DeviceSet { allowed, basis })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` GPUs of one model; `minors[i]` the minor of NVML index `i`.
    fn gpus(minors: &[u32]) -> Vec<GpuRef> {
        minors
            .iter()
            .enumerate()
            .map(|(i, m)| GpuRef {
                uuid: format!("GPU-{i}0000000-0000-0000-0000-000000000000"),
                name: "NVIDIA A100-SXM4-40GB".into(),
                minor: Some(*m),
            })
            .collect()
    }

    fn slurm(var: &str, v: &str) -> GpuEnv {
        GpuEnv {
            slurm_gpus: Some((var.into(), v.into())),
            ..Default::default()
        }
    }

    fn set(cvd: &str, env: &GpuEnv, g: &[GpuRef], on: &[u32]) -> Result<Vec<u32>, String> {
        device_set(cvd, Some(env), g, false, on).map(|s| s.allowed)
    }

    #[test]
    fn slurm_constrained_job_counts_its_own_gpus_from_zero() {
        // A job on physical GPU 1 with local CUDA_VISIBLE_DEVICES=0 (ConstrainDevices).
        let g = gpus(&[0, 1, 2, 3]);
        let env = slurm("SLURM_JOB_GPUS", "1");
        assert_eq!(set("0", &env, &g, &[1]), Ok(vec![1]));
        // Two GPUs: local 0,1 are physical 2 and 3.
        let env = slurm("SLURM_STEP_GPUS", "2,3");
        assert_eq!(set("0,1", &env, &g, &[2, 3]), Ok(vec![2, 3]));
        assert_eq!(set("1", &env, &g, &[3]), Ok(vec![3]));
    }

    #[test]
    fn slurm_without_constraint_keeps_global_indices() {
        let g = gpus(&[0, 1, 2, 3]);
        let env = slurm("SLURM_JOB_GPUS", "1,3");
        assert_eq!(set("1,3", &env, &g, &[1, 3]), Ok(vec![1, 3]));
    }

    #[test]
    fn slurm_minors_are_mapped_through_the_minor_numbers() {
        // Minors permuted against PCI order: minor 1 is NVML index 2.
        let g = gpus(&[2, 0, 1, 3]);
        let env = slurm("SLURM_JOB_GPUS", "1");
        let got = set("0", &env, &g, &[2]).expect("decided");
        // Read as a minor (older Slurm) it is GPU 2; as a GRES index (newer), GPU 1: both
        // readings are allowed, never a stray on either.
        assert_eq!(got, vec![1, 2]);
        assert!(!got.contains(&0) && !got.contains(&3));
    }

    #[test]
    fn slurm_that_names_nothing_here_or_unknown_minors_stay_unknown() {
        let g = gpus(&[0, 1]);
        assert!(set("0", &slurm("SLURM_JOB_GPUS", "7"), &g, &[0]).is_err());
        assert!(set("0", &slurm("SLURM_JOB_GPUS", "gpu:1"), &g, &[0]).is_err());
        let mut unknown = gpus(&[0, 1]);
        unknown[1].minor = None;
        assert!(set("0", &slurm("SLURM_JOB_GPUS", "1"), &unknown, &[1]).is_err());
    }

    #[test]
    fn slurm_is_not_read_when_cuda_visible_devices_is_unset() {
        let g = gpus(&[0, 1]);
        assert_eq!(
            set(CVD_UNSET, &slurm("SLURM_JOB_GPUS", "1"), &g, &[0]),
            Ok(vec![0, 1])
        );
    }

    #[test]
    fn device_files_give_the_container_its_gpus_and_cvd_counts_them() {
        // `docker run --gpus device=3` (its file is /dev/nvidia1 here) with an image's
        // CUDA_VISIBLE_DEVICES=0, NVIDIA_VISIBLE_DEVICES=all kept (CDI).
        let g = gpus(&[2, 0, 3, 1]);
        let env = GpuEnv {
            nvidia_visible_devices: Some("all".into()),
            node_minors: Some(vec![1]),
            ..Default::default()
        };
        let s = device_set("0", Some(&env), &g, true, &[3]).expect("decided");
        assert_eq!(s.allowed, vec![3]);
        assert!(s.basis[0].0.contains("can open"), "{:?}", s.basis);
        // Without the files: the CDI case stays unknown, as before.
        let env = GpuEnv {
            nvidia_visible_devices: Some("all".into()),
            ..Default::default()
        };
        assert!(device_set("0", Some(&env), &g, true, &[3]).is_err());
    }

    #[test]
    fn a_file_view_that_contradicts_the_driver_is_not_used() {
        let g = gpus(&[0, 1, 2, 3]);
        let env = GpuEnv {
            node_minors: Some(vec![3]),
            ..Default::default()
        };
        // NVML lists it on GPU 0, which its files say it cannot open.
        assert_eq!(openable(Some(&env), &g, &[0]), None);
        assert_eq!(openable(Some(&env), &g, &[3]), Some(vec![3]));
        // Every file there: no restriction.
        let all = GpuEnv {
            node_minors: Some(vec![0, 1, 2, 3]),
            ..Default::default()
        };
        assert_eq!(openable(Some(&all), &g, &[0]), None);
    }

    #[test]
    fn device_cgroup_narrows_the_files() {
        // Slurm ConstrainDevices on cgroup v1: every file in /dev, the cgroup allows minor 2
        // (and nvidiactl's 255).
        let g = gpus(&[0, 1, 2, 3]);
        let env = GpuEnv {
            node_minors: Some(vec![0, 1, 2, 3]),
            cgroup_minors: Some(vec![2, 255]),
            slurm_gpus: Some(("SLURM_JOB_GPUS".into(), "2".into())),
            ..Default::default()
        };
        assert_eq!(set("0", &env, &g, &[2]), Ok(vec![2]));
        // A process outside its CUDA_VISIBLE_DEVICES is still seen as such.
        assert_eq!(set("0", &env, &g, &[2]).map(|s| s.contains(&0)), Ok(false));
    }
}
