//! Where a sharded run's configuration comes from: `--shard I/N`, `--shards N` with Kubernetes'
//! `JOB_COMPLETION_INDEX`, or Slurm's `SLURM_PROCID` / `SLURM_NTASKS` / `SLURM_JOB_ID` /
//! `SLURM_JOB_NODELIST`; the coordinator from `--coordinator` / `--coordinator-port` /
//! `--coordinator-bind` (or their `AGENTX_COORDINATOR*` variables); the rendezvous secret from
//! `AGENTX_RENDEZVOUS_TOKEN`, else the Slurm job step or the Kubernetes Job (`AGENTX_JOB_UID`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail};
use sha2::{Digest, Sha256};

use crate::run::rendezvous::DEFAULT_PORT;
use crate::run::shard::{RendezvousAuth, ShardConfig};

/// The sharding flags as given.
#[derive(Debug, Clone, Default)]
pub(crate) struct ShardFlags {
    /// `--shard I/N`.
    pub(crate) shard: Option<String>,
    /// `--shards N` (the index from `JOB_COMPLETION_INDEX`).
    pub(crate) shards: Option<u32>,
    /// `--coordinator HOST[:PORT]` (or `AGENTX_COORDINATOR`).
    pub(crate) coordinator: Option<String>,
    /// `--coordinator-port` (or `AGENTX_COORDINATOR_PORT`).
    pub(crate) port: Option<u16>,
    /// `--coordinator-bind ADDR` (or `AGENTX_COORDINATOR_BIND`).
    pub(crate) bind: Option<String>,
    pub(crate) timeout: Option<f64>,
    pub(crate) merge_into: Option<PathBuf>,
}

/// The shard of this process, or `None` for a run in one process. `env` reads a variable (the
/// process environment in the CLI; a map in tests). Also returns a run id the shards share when
/// the scheduler gives one (Slurm's job id) and none was given.
pub(crate) fn resolve(
    flags: &ShardFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<(ShardConfig, Option<String>)>> {
    let var = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let num = |what: &str, text: &str| -> anyhow::Result<u32> {
        text.trim()
            .parse::<u32>()
            .map_err(|_| anyhow!("{what}={text:?} is not a shard number"))
    };
    let (index, count, source) = if let Some(shard) = &flags.shard {
        if flags.shards.is_some() {
            bail!("--shard I/N and --shards N are two ways to say the same thing: give one");
        }
        let (index_text, count_text) = shard.split_once('/').ok_or_else(|| {
            anyhow!("--shard {shard:?}: expected I/N, e.g. --shard 0/4 (0-based)")
        })?;
        (
            num("--shard", index_text)?,
            num("--shard", count_text)?,
            "--shard",
        )
    } else if let Some(count) = flags.shards {
        let index_text = var("JOB_COMPLETION_INDEX").ok_or_else(|| {
            anyhow!("--shards {count} takes the shard index from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job sets it); it is not set: use --shard I/{count} elsewhere")
        })?;
        (
            num("JOB_COMPLETION_INDEX", &index_text)?,
            count,
            "--shards + JOB_COMPLETION_INDEX",
        )
    } else if let (Some(procid), Some(ntasks), Some(_)) = (
        var("SLURM_PROCID"),
        var("SLURM_NTASKS"),
        // Only inside an srun step: the batch script itself also has SLURM_PROCID=0 and the
        // job's task count, and is not a shard.
        var("SLURM_STEP_ID"),
    ) {
        let ntasks = num("SLURM_NTASKS", &ntasks)?;
        if ntasks <= 1 && flags.merge_into.is_none() && flags.coordinator.is_none() {
            // One task under srun: a plain run.
            return Ok(None);
        }
        (
            num("SLURM_PROCID", &procid)?,
            ntasks,
            "SLURM_PROCID/SLURM_NTASKS",
        )
    } else {
        if flags.coordinator.is_some() || flags.merge_into.is_some() {
            bail!("--coordinator and --merge-into belong to a sharded run: add --shard I/N (or run under srun / a Kubernetes Indexed Job with --shards N)");
        }
        return Ok(None);
    };
    if count == 0 {
        bail!("{source}: a run of 0 shards cannot run; N must be at least 1");
    }
    if index >= count {
        bail!(
            "{source}: shard index {index} is out of range for {count} shards (indices are 0 to {})",
            count - 1
        );
    }
    let given_port = match flags.port {
        Some(port) => Some((port, "--coordinator-port".to_string())),
        None => match var("AGENTX_COORDINATOR_PORT") {
            Some(text) => Some((
                text.trim().parse().map_err(|_| {
                    anyhow!("AGENTX_COORDINATOR_PORT={text:?} is not a port number")
                })?,
                format!("AGENTX_COORDINATOR_PORT={text}"),
            )),
            None => None,
        },
    };
    let host = match flags
        .coordinator
        .clone()
        .or_else(|| var("AGENTX_COORDINATOR"))
    {
        Some(host) => host,
        None => match var("SLURM_JOB_NODELIST").or_else(|| var("SLURM_NODELIST")) {
            Some(list) => first_host(&list)
                .ok_or_else(|| anyhow!("SLURM_JOB_NODELIST={list:?}: cannot read its first host; pass --coordinator HOST:PORT"))?,
            None if count == 1 || index == 0 => "127.0.0.1".into(),
            None => bail!("shard {index}/{count} needs to know where shard 0 listens: pass --coordinator HOST:PORT (or AGENTX_COORDINATOR)"),
        },
    };
    // The port in `--coordinator HOST:PORT` is the rendezvous port for every shard: shard 0 listens
    // on it and the others dial it.
    let (host_only, host_port) = split_port(&host)?;
    let port = match (host_port, given_port) {
        (Some(named), Some((given, from))) if named != given => bail!(
            "--coordinator {host} names port {named} but {from} says {given}: give the rendezvous port once"
        ),
        (Some(named), _) => named,
        (None, Some((given, _))) => given,
        (None, None) => DEFAULT_PORT,
    };
    let coordinator = format!("{host_only}:{port}");
    let bind = match flags
        .bind
        .clone()
        .or_else(|| var("AGENTX_COORDINATOR_BIND"))
    {
        None => None,
        Some(bind) => {
            let (bind_host, bind_port) =
                split_port(&bind).map_err(|e| anyhow!("--coordinator-bind: {e}"))?;
            if let Some(other) = bind_port.filter(|other| *other != port) {
                bail!(
                    "--coordinator-bind {bind} names port {other} but the rendezvous port is {port} (from --coordinator / --coordinator-port): give the bind address without a port"
                );
            }
            Some(bind_host.to_string())
        }
    };
    let timeout = match flags.timeout {
        Some(seconds) => crate::run::positive_secs("--rendezvous-timeout", seconds)?,
        None => Duration::from_secs(300),
    };
    let run_id = var("SLURM_JOB_ID").map(|job| {
        let step = var("SLURM_STEP_ID").unwrap_or_default();
        let digest = Sha256::digest(format!("slurm:{job}.{step}").as_bytes());
        hex::encode(&digest[..16])
    });
    Ok(Some((
        ShardConfig {
            index,
            count,
            coordinator,
            port,
            bind,
            auth: auth_from_env(&var),
            timeout,
            merge_into: flags.merge_into.clone(),
            source,
        },
        run_id,
    )))
}

/// `AGENTX_RENDEZVOUS_TOKEN`; else the Slurm job step (`SLURM_JOB_ID`, `SLURM_STEP_ID`), which
/// every task of the step shares; else the Kubernetes Job (`AGENTX_JOB_UID`, which the
/// manifests in `deploy/kubernetes` set from the Job's uid); else none.
fn auth_from_env(var: &dyn Fn(&str) -> Option<String>) -> RendezvousAuth {
    if let Some(token) = var("AGENTX_RENDEZVOUS_TOKEN") {
        return RendezvousAuth::token(&token, "AGENTX_RENDEZVOUS_TOKEN");
    }
    if let Some(job) = var("SLURM_JOB_ID") {
        let step = var("SLURM_STEP_ID").unwrap_or_default();
        return RendezvousAuth::token(&format!("slurm:{job}.{step}"), "the Slurm job step");
    }
    if let Some(uid) = var("AGENTX_JOB_UID") {
        return RendezvousAuth::token(
            &format!("k8s-job:{uid}"),
            "the Kubernetes Job (AGENTX_JOB_UID)",
        );
    }
    RendezvousAuth::none()
}

/// The first host of a Slurm node list: `node1,node2`, `gpu[01-04,07]`, `a[1-2],b3`.
pub(crate) fn first_host(list: &str) -> Option<String> {
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    // The first entry ends at a comma outside brackets.
    let mut depth = 0;
    let mut end = list.len();
    for (i, character) in list.char_indices() {
        match character {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let first = &list[..end];
    match first.split_once('[') {
        None => Some(first.to_string()),
        Some((prefix, rest)) => {
            let inner = rest.split(']').next()?;
            let range = inner.split(',').next()?;
            let first_number = range.split('-').next()?;
            if first_number.is_empty() || !first_number.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let suffix = rest.split_once(']').map(|x| x.1).unwrap_or("");
            Some(format!("{prefix}{first_number}{suffix}"))
        }
    }
}

/// `HOST[:PORT]` (an IPv6 host in brackets) as the host and the port, if one is given.
fn split_port(given: &str) -> anyhow::Result<(&str, Option<u16>)> {
    let bad = || anyhow!("--coordinator {given:?}: the port is not a number from 1 to 65535");
    if let Some(rest) = given.strip_prefix('[') {
        let end = rest
            .find(']')
            .ok_or_else(|| anyhow!("--coordinator {given:?}: no closing `]`"))?;
        let host = &given[..end + 2];
        return match &rest[end + 1..] {
            "" => Ok((host, None)),
            port_text => match port_text.strip_prefix(':').map(str::parse::<u16>) {
                Some(Ok(port)) if port > 0 => Ok((host, Some(port))),
                _ => Err(bad()),
            },
        };
    }
    match given.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => Ok((given, None)),
        Some((host, port_text)) => match port_text.parse::<u16>() {
            Ok(port) if port > 0 => Ok((host, Some(port))),
            _ => Err(bad()),
        },
        None => Ok((given, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn slurm_node_lists() {
        assert_eq!(first_host("node1").as_deref(), Some("node1"));
        assert_eq!(first_host("node1,node2").as_deref(), Some("node1"));
        assert_eq!(first_host("gpu[01-04,07]").as_deref(), Some("gpu01"));
        assert_eq!(first_host("gpu[07,01-04]").as_deref(), Some("gpu07"));
        assert_eq!(first_host("a[1-2]-ib,b3").as_deref(), Some("a1-ib"));
        assert_eq!(first_host("").as_deref(), None);
        assert_eq!(first_host("x[]").as_deref(), None);
    }

    #[test]
    fn the_port_in_coordinator_is_the_port_of_every_shard() {
        let none = env(&[]);
        for index in ["0/2", "1/2"] {
            let f = ShardFlags {
                shard: Some(index.into()),
                coordinator: Some("127.0.0.1:46563".into()),
                ..Default::default()
            };
            let (c, _) = resolve(&f, &none).unwrap().unwrap();
            assert_eq!((c.port, c.coordinator.as_str()), (46563, "127.0.0.1:46563"));
        }
        let f = ShardFlags {
            shard: Some("0/2".into()),
            coordinator: Some("[::1]:4001".into()),
            ..Default::default()
        };
        let (c, _) = resolve(&f, &none).unwrap().unwrap();
        assert_eq!((c.port, c.coordinator.as_str()), (4001, "[::1]:4001"));
        // The same port twice is fine; two ports are an error naming both.
        let f = ShardFlags {
            shard: Some("1/2".into()),
            coordinator: Some("h:4000".into()),
            port: Some(4000),
            ..Default::default()
        };
        assert_eq!(resolve(&f, &none).unwrap().unwrap().0.port, 4000);
        let f = ShardFlags {
            port: Some(5000),
            ..f
        };
        let e = resolve(&f, &none).unwrap_err().to_string();
        assert!(
            e.contains("port 4000") && e.contains("--coordinator-port says 5000"),
            "{e}"
        );
        let f = ShardFlags {
            shard: Some("1/2".into()),
            coordinator: Some("h:99999".into()),
            ..Default::default()
        };
        assert!(resolve(&f, &none).is_err());
    }

    #[test]
    fn the_shard_comes_from_flags_or_the_scheduler() {
        let none = env(&[]);
        assert!(resolve(&ShardFlags::default(), &none).unwrap().is_none());
        let f = ShardFlags {
            shard: Some("1/3".into()),
            coordinator: Some("h0".into()),
            ..Default::default()
        };
        let (c, id) = resolve(&f, &none).unwrap().unwrap();
        assert_eq!(
            (c.index, c.count, c.coordinator.as_str()),
            (1, 3, "h0:29517")
        );
        assert_eq!(id, None);
        // Slurm: index, count, the first node, and a run id from the job.
        let slurm = env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "42"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_NODELIST", "gpu[03-04]"),
            ("AGENTX_COORDINATOR_PORT", "4000"),
        ]);
        let (c, id) = resolve(&ShardFlags::default(), &slurm).unwrap().unwrap();
        assert_eq!(
            (c.index, c.count, c.coordinator.as_str()),
            (1, 2, "gpu03:4000")
        );
        assert_eq!(id.as_ref().map(String::len), Some(32));
        let (_, id0) = resolve(
            &ShardFlags::default(),
            &env(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", "42"),
                ("SLURM_STEP_ID", "0"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(id, id0, "every task of a job shares the run id");
        // The batch script itself (no step) is not a shard.
        let batch = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "42"),
        ]);
        assert!(resolve(&ShardFlags::default(), &batch).unwrap().is_none());
        // Kubernetes: --shards with JOB_COMPLETION_INDEX.
        let k8s = env(&[("JOB_COMPLETION_INDEX", "2")]);
        let f = ShardFlags {
            shards: Some(4),
            coordinator: Some("agentx-0.agentx-coordinator:29517".into()),
            ..Default::default()
        };
        let (c, _) = resolve(&f, &k8s).unwrap().unwrap();
        assert_eq!((c.index, c.count), (2, 4));
        assert_eq!(c.coordinator, "agentx-0.agentx-coordinator:29517");
    }

    #[test]
    fn the_rendezvous_secret_and_where_shard_0_listens() {
        let f = ShardFlags {
            shard: Some("0/2".into()),
            ..Default::default()
        };
        let (c, _) = resolve(&f, &env(&[])).unwrap().unwrap();
        assert!(!c.auth.is_authenticated());
        assert_eq!(c.bind, None);
        let token = env(&[("AGENTX_RENDEZVOUS_TOKEN", "x"), ("SLURM_JOB_ID", "42")]);
        let (c, _) = resolve(&f, &token).unwrap().unwrap();
        assert_eq!(c.auth.source, "AGENTX_RENDEZVOUS_TOKEN");
        assert_eq!(c.auth, RendezvousAuth::token("x", ""));
        // Every task of one Slurm step derives the same secret; another step another.
        let step = |id: &'static str, step: &'static str, i: &'static str| {
            let e = env(&[
                ("SLURM_PROCID", i),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", id),
                ("SLURM_STEP_ID", step),
                ("SLURM_JOB_NODELIST", "node1"),
            ]);
            resolve(&ShardFlags::default(), &e).unwrap().unwrap().0.auth
        };
        assert!(step("42", "0", "0").is_authenticated());
        assert_eq!(step("42", "0", "0"), step("42", "0", "1"));
        assert_ne!(step("42", "0", "0"), step("42", "1", "0"));
        assert_ne!(step("42", "0", "0"), step("43", "0", "0"));
        let k8s = |uid: &'static str| {
            let e = env(&[("JOB_COMPLETION_INDEX", "1"), ("AGENTX_JOB_UID", uid)]);
            let f = ShardFlags {
                shards: Some(2),
                coordinator: Some("h".into()),
                ..Default::default()
            };
            resolve(&f, &e).unwrap().unwrap().0.auth
        };
        assert!(k8s("u-1").is_authenticated());
        assert_ne!(k8s("u-1"), k8s("u-2"));
        // --coordinator-bind: a host, or one with the rendezvous port; another port is an error.
        let f = ShardFlags {
            shard: Some("0/2".into()),
            coordinator: Some("node1:4000".into()),
            bind: Some("0.0.0.0".into()),
            ..Default::default()
        };
        assert_eq!(
            resolve(&f, &env(&[])).unwrap().unwrap().0.bind.as_deref(),
            Some("0.0.0.0")
        );
        let f = ShardFlags {
            bind: Some("[::]:4000".into()),
            ..f
        };
        assert_eq!(
            resolve(&f, &env(&[])).unwrap().unwrap().0.bind.as_deref(),
            Some("[::]")
        );
        let f = ShardFlags {
            bind: Some("10.0.0.1:4001".into()),
            ..f
        };
        let e = resolve(&f, &env(&[])).unwrap_err().to_string();
        assert!(
            e.contains("--coordinator-bind 10.0.0.1:4001 names port 4001"),
            "{e}"
        );
    }

    #[test]
    fn bad_shards_say_what_is_wrong() {
        let none = env(&[]);
        let e = |f: ShardFlags, env: &dyn Fn(&str) -> Option<String>| {
            resolve(&f, env).unwrap_err().to_string()
        };
        let shard = |s: &str| ShardFlags {
            shard: Some(s.into()),
            coordinator: Some("h".into()),
            ..Default::default()
        };
        assert!(e(shard("3/3"), &none).contains("out of range for 3 shards (indices are 0 to 2)"));
        assert!(e(shard("1/0"), &none).contains("0 shards"));
        assert!(e(shard("x/2"), &none).contains("not a shard number"));
        assert!(e(shard("2"), &none).contains("expected I/N"));
        let f = ShardFlags {
            shards: Some(2),
            ..Default::default()
        };
        assert!(e(f, &none).contains("JOB_COMPLETION_INDEX"));
        let f = ShardFlags {
            shard: Some("1/2".into()),
            ..Default::default()
        };
        assert!(e(f, &none).contains("--coordinator HOST:PORT"));
        let f = ShardFlags {
            merge_into: Some("m".into()),
            ..Default::default()
        };
        assert!(e(f, &none).contains("belong to a sharded run"));
    }
}
