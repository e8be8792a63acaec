//! Jobs' processes: each attempt runs under `apiary job-exec`, a small supervisor that
//! leads the attempt's own process group, so that the agent (or its next incarnation)
//! can signal and count every process of the attempt, and that ends the attempt when
//! the agent that started it dies, since nothing else would.

use crate::AgentError;
use rustix::process::{Pid, Signal};
use std::path::Path;
use std::time::{Duration, Instant};

/// Sends `sig` to every process of the group `pgid`; a group already gone is no error.
pub fn signal_group(pgid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// Whether any live (not zombie) process is in the group `pgid`. Zombies are skipped:
/// an orphan that exited waits for init to reap it, and holds no GPU.
pub fn group_alive(pgid: i32) -> bool {
    let Some(p) = Pid::from_raw(pgid) else {
        return false;
    };
    if rustix::process::test_kill_process_group(p).is_err() {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        // No /proc: trust the signal test.
        return true;
    };
    dir.flatten().any(|e| {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        stat(pid).is_some_and(|s| s.pgrp == pgid && s.state != 'Z')
    })
}

/// The fields of `/proc/PID/stat` the agent needs.
pub struct Stat {
    /// One-letter state (`Z`: zombie).
    pub state: char,
    /// Parent process.
    pub ppid: i32,
    /// Process group.
    pub pgrp: i32,
    /// Start time since boot, clock ticks: with the pid, it names one process.
    pub start: u64,
}

/// Reads `/proc/PID/stat` (the command name may hold spaces and parentheses: the fields
/// follow its last `)`).
pub fn stat(pid: &str) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) pgrp(2) ... starttime(19).
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

/// The live (not zombie) descendants of `root`, whatever their group or session.
pub fn descendants(root: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let procs: Vec<(i32, i32, char)> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let pid = name.to_str()?;
            let s = stat(pid)?;
            Some((pid.parse().ok()?, s.ppid, s.state))
        })
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid, state) in &procs {
            if ppid == p {
                frontier.push(pid);
                if state != 'Z' {
                    out.push(pid);
                }
            }
        }
    }
    out
}

/// Sends `sig` to each of `pids`; one already gone is no error.
pub fn signal_each(pids: &[i32], sig: Signal) {
    for &p in pids {
        if let Some(p) = Pid::from_raw(p) {
            let _ = rustix::process::kill_process(p, sig);
        }
    }
}

/// Ends the group `pgid`: SIGTERM, then SIGKILL once `grace` has passed, and returns when
/// no live process is left in it (or after `limit`, returning false).
pub fn end_group(pgid: i32, grace: Duration, limit: Duration) -> bool {
    let t0 = Instant::now();
    signal_group(pgid, Signal::TERM);
    let mut killed = false;
    while group_alive(pgid) {
        if t0.elapsed() >= limit {
            return false;
        }
        if !killed && t0.elapsed() >= grace {
            signal_group(pgid, Signal::KILL);
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// A user jobs run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Name and home directory, when `/etc/passwd` knows the user.
    pub name: Option<String>,
    /// Home directory.
    pub home: Option<String>,
}

/// Resolves `USER`, `UID` or `UID:GID` against `passwd` (the text of `/etc/passwd`).
pub fn resolve_user(spec: &str, passwd: &str) -> Result<RunAs, AgentError> {
    let bad = |why: &str| AgentError::Flag {
        flag: format!("--run-as {spec}"),
        why: why.to_string(),
    };
    let entries: Vec<Vec<&str>> = passwd
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 7)
        .collect();
    let entry = |f: &Vec<&str>| -> Option<RunAs> {
        Some(RunAs {
            uid: f[2].parse().ok()?,
            gid: f[3].parse().ok()?,
            name: Some(f[0].to_string()),
            home: Some(f[5].to_string()),
        })
    };
    if let Some((u, g)) = spec.split_once(':') {
        let (Ok(uid), Ok(gid)) = (u.parse::<u32>(), g.parse::<u32>()) else {
            return Err(bad("UID:GID must be two numbers"));
        };
        let known = entries
            .iter()
            .filter_map(entry)
            .find(|e| e.uid == uid)
            .map(|e| (e.name, e.home));
        let (name, home) = known.unwrap_or((None, None));
        return Ok(RunAs {
            uid,
            gid,
            name,
            home,
        });
    }
    if let Ok(uid) = spec.parse::<u32>() {
        return entries
            .iter()
            .filter_map(entry)
            .find(|e| e.uid == uid)
            .ok_or_else(|| bad("no user with that uid in /etc/passwd (give UID:GID)"));
    }
    entries
        .iter()
        .filter(|f| f[0] == spec)
        .find_map(entry)
        .ok_or_else(|| bad("no such user in /etc/passwd"))
}

/// Reads the agent's token from `path` (a file, or `/dev/fd/N` for a descriptor the
/// agent inherited). A regular file others may read is refused, as ssh refuses a key.
pub fn read_token(path: &Path) -> Result<String, AgentError> {
    use std::os::unix::fs::PermissionsExt as _;
    let bad = |why: String| AgentError::Flag {
        flag: format!("--token-file {}", path.display()),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
        return Err(bad(format!(
            "group or others may read it (mode {:o}); chmod 600 it",
            meta.permissions().mode() & 0o777
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(bad("expected one token on one line".into()));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
        # a comment\n\
        train:x:1001:100:Trainer:/home/train:/bin/sh\n";

    #[test]
    fn users_resolve_by_name_uid_or_pair() {
        let u = resolve_user("train", PASSWD).unwrap();
        assert_eq!(
            (u.uid, u.gid, u.home.as_deref()),
            (1001, 100, Some("/home/train"))
        );
        assert_eq!(
            resolve_user("65534", PASSWD).unwrap().name.as_deref(),
            Some("nobody")
        );
        let p = resolve_user("5000:5000", PASSWD).unwrap();
        assert_eq!((p.uid, p.gid, p.name), (5000, 5000, None));
        assert!(
            resolve_user("ghost", PASSWD)
                .unwrap_err()
                .to_string()
                .contains("no such user")
        );
        assert!(resolve_user("1:x", PASSWD).is_err());
        assert!(resolve_user("4242", PASSWD).is_err());
    }

    #[test]
    fn stat_reads_fields_after_a_name_with_parentheses() {
        let me = std::process::id().to_string();
        let s = stat(&me).unwrap();
        assert_eq!(s.pgrp, rustix::process::getpgrp().as_raw_nonzero().get());
        assert!(s.start > 0);
    }

    #[test]
    fn a_token_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("apiary-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "agent-secret-0123456789\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            read_token(&f)
                .unwrap_err()
                .to_string()
                .contains("chmod 600")
        );
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token(&f).unwrap(), "agent-secret-0123456789");
        std::fs::write(&f, "two words\n").unwrap();
        assert!(read_token(&f).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
