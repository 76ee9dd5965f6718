//! `vramdoc sim run`, `sim ps` and the box's daemons: the client side of the box's container
//! runtime (`vramdoc_sim::runtime`, `vramdoc_sim::container`).

use crate::cli::{CdiEnvArg, DeviceIdsArg, SimPsArgs, SimRunArgs, StrategyArg};
use crate::exit::{CodedError, NOT_FOUND, RUN_FAILED};
use anyhow::Result;
use vramdoc_sim::container::{self, CdiEnv, ContainerSpec, IdKind, Strategy};
use vramdoc_sim::{runtime, SimBox};

fn failed(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(CodedError {
        code: RUN_FAILED,
        message: message.into(),
    })
}

fn spec_of(a: &SimRunArgs, sim: &SimBox) -> Result<ContainerSpec> {
    let gpus = container::parse_gpus(sim, &a.gpus).map_err(|e| failed(e.to_string()))?;
    let cgroup = match a.cgroup.trim() {
        "none" => None,
        c => Some(container::check_cgroup_path(c).map_err(|e| failed(format!("--cgroup: {e}")))?),
    };
    Ok(ContainerSpec {
        gpus,
        strategy: match a.strategy {
            StrategyArg::Envvar => Strategy::Envvar,
            StrategyArg::VolumeMounts => Strategy::VolumeMounts,
            StrategyArg::Cdi => Strategy::Cdi,
            StrategyArg::Mig => Strategy::Mig,
        },
        ids: match a.device_ids {
            DeviceIdsArg::Uuid => IdKind::Uuid,
            DeviceIdsArg::Index => IdKind::Index,
        },
        cdi_env: match a.cdi_env {
            CdiEnvArg::All => CdiEnv::All,
            CdiEnvArg::Void => CdiEnv::Void,
        },
        cgroup,
    })
}

pub fn run(sim: &SimBox, a: &SimRunArgs) -> Result<i32> {
    let spec = spec_of(a, sim)?;
    if let Some(f) = &a.cidfile {
        // docker/cli's contract: the file must not exist.
        if f.exists() {
            return Err(failed(format!(
                "container ID file found, make sure the other container isn't running or delete {}",
                f.display()
            )));
        }
    }
    let sock = runtime::socket_path(sim.dir());
    if !sock.exists() {
        super::start_daemon("runtimed", sim.dir(), &sock);
    }
    // The caller's environment, with the session's box (a `--sim` box is named only here).
    let mut env: Vec<_> = std::env::vars_os()
        .filter(|(k, _)| k != container::NVIDIA_VISIBLE_DEVICES && k != vramdoc_sim::SIM_DIR_ENV)
        .collect();
    env.push((vramdoc_sim::SIM_DIR_ENV.into(), sim.dir().into()));
    let cwd = std::env::current_dir().ok();
    let mut attached = runtime::run(sim.dir(), &spec, &a.cmd, &env, cwd.as_deref(), a.detach)
        .map_err(|e| {
            let text = e.to_string();
            if text.ends_with("command not found") {
                anyhow::Error::new(CodedError {
                    code: NOT_FOUND,
                    message: text,
                })
            } else {
                failed(text)
            }
        })?;
    if let Some(f) = &a.cidfile {
        std::fs::write(f, &attached.id)
            .map_err(|e| failed(format!("writing --cidfile {}: {e}", f.display())))?;
    }
    if a.detach {
        crate::term::print(&attached.id)?;
        return Ok(0);
    }
    // Forward the signals a terminal or a supervisor sends us, as docker's sig-proxy does.
    if let Some(s) = attached.signaller() {
        use signal_hook::consts::*;
        if let Ok(mut signals) = signal_hook::iterator::Signals::new([
            SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
        ]) {
            std::thread::spawn(move || {
                for sig in signals.forever() {
                    let _ = runtime::forward_signal(&s, sig);
                }
            });
        }
    }
    attached.wait().ok_or_else(|| {
        failed("lost contact with the box's runtime daemon before the container exited")
    })
}

pub fn ps(sim: &SimBox, a: &SimPsArgs) -> Result<i32> {
    let all = runtime::containers(sim.dir());
    if a.json {
        let v: Vec<_> = all
            .iter()
            .map(|(r, alive)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["running"] = (*alive).into();
                v
            })
            .collect();
        crate::term::print_json(&serde_json::to_string_pretty(&v)?)?;
        return Ok(0);
    }
    if all.is_empty() {
        crate::term::print("no containers")?;
        return Ok(0);
    }
    let mut t = super::table(vec![
        "container",
        "pid",
        "status",
        "gpus",
        "NVIDIA_VISIBLE_DEVICES",
        "cgroup",
        "command",
    ]);
    for (r, alive) in &all {
        t.add_row(vec![
            r.id.chars().take(12).collect(),
            r.pid.to_string(),
            match (r.exit_code, alive) {
                (Some(c), _) => format!("exited ({c})"),
                (None, true) => "running".into(),
                (None, false) => "gone".into(),
            },
            r.spec
                .gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            crate::term::clean(&r.nvidia_visible_devices),
            r.cgroup
                .as_deref()
                .map(|c| {
                    let short: String = r.id.chars().take(12).collect();
                    crate::term::clean(&c.replace(&r.id, &format!("{short}…")))
                })
                .unwrap_or_else(|| "-".into()),
            short(&crate::term::clean(&r.command.join(" ")), 40),
        ]);
    }
    crate::term::print(&t.to_string())?;
    Ok(0)
}

/// `s` cut to `n` characters, with an ellipsis when cut.
fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n - 1).collect();
    out.push('…');
    out
}
