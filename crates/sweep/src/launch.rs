//! Launchers for a planned sweep's shards on engines people already run: a Slurm job
//! array and a Kubernetes Indexed Job. Each task runs `apiary sweep run DIR --count K`,
//! which takes its shard from `SLURM_ARRAY_TASK_ID` or `JOB_COMPLETION_INDEX`; the
//! engine only counts to the number of shards.

use crate::shard::{Planned, shards};
use std::fmt::Write;
use std::path::Path;

/// What a launcher needs beyond the planned sweep.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `apiary` binary the tasks run (a path every node can see, or a name on PATH).
    pub apiary: String,
    /// Cells per shard.
    pub count: usize,
    /// Threads per shard (cores asked of the engine).
    pub threads: usize,
    /// Shards running at once (`%K` of the array; the Job's parallelism); all when
    /// `None`.
    pub parallel: Option<usize>,
}

impl Launch {
    /// How many shards the sweep makes.
    pub fn shards(&self, p: &Planned) -> usize {
        shards(p.cells.len(), self.count).max(1)
    }

    fn run_args(&self, dir: &Path) -> Vec<String> {
        vec![
            self.apiary.clone(),
            "sweep".into(),
            "run".into(),
            dir.display().to_string(),
            "--count".into(),
            self.count.to_string(),
            "-j".into(),
            self.threads.to_string(),
        ]
    }
}

/// Slurm specifics.
#[derive(Clone, Debug, Default)]
pub struct SlurmOptions {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--time` per shard (Slurm's formats: `MM`, `HH:MM:SS`, `D-HH`).
    pub time: Option<String>,
}

/// `s` quoted for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The job-array script: one task per shard, logs under `DIR/logs/`. The folder must be
/// one every node sees (a shared file system), as must the trace files.
pub fn slurm_script(p: &Planned, l: &Launch, o: &SlurmOptions) -> String {
    let dir = p.dir.display().to_string();
    let n = l.shards(p);
    let mut array = format!("0-{}", n - 1);
    if let Some(k) = l.parallel {
        let _ = write!(array, "%{k}");
    }
    let mut s = String::new();
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(
        s,
        "# Written by `apiary sweep slurm`: sweep '{}', {} cells in {n} shards of {}.",
        p.sweep.name,
        p.cells.len(),
        l.count
    );
    let _ = writeln!(
        s,
        "#SBATCH --job-name={}",
        shell_quote(&format!("apiary-{}", p.sweep.name))
    );
    let _ = writeln!(s, "#SBATCH --array={array}");
    let _ = writeln!(s, "#SBATCH --ntasks=1");
    let _ = writeln!(s, "#SBATCH --cpus-per-task={}", l.threads);
    let _ = writeln!(
        s,
        "#SBATCH --output={}",
        shell_quote(&format!("{dir}/logs/shard-%a.out"))
    );
    if let Some(part) = &o.partition {
        let _ = writeln!(s, "#SBATCH --partition={}", shell_quote(part));
    }
    if let Some(t) = &o.time {
        let _ = writeln!(s, "#SBATCH --time={}", shell_quote(t));
    }
    let _ = writeln!(s, "set -euo pipefail");
    let _ = writeln!(s, "# SLURM_ARRAY_TASK_ID picks the shard.");
    let args: Vec<String> = l.run_args(&p.dir).iter().map(|a| shell_quote(a)).collect();
    let _ = writeln!(s, "exec {}", args.join(" "));
    s
}

/// The commands that submit the array and, once every task has ended, merge.
pub fn slurm_submit(p: &Planned, l: &Launch, script: &Path) -> String {
    let merge = format!(
        "{} sweep merge {}",
        shell_quote(&l.apiary),
        shell_quote(&p.dir.display().to_string())
    );
    format!(
        "jid=$(sbatch --parsable {}) && sbatch --dependency=afterany:$jid --output={} --wrap={}",
        shell_quote(&script.display().to_string()),
        shell_quote(&format!("{}/logs/merge.out", p.dir.display())),
        shell_quote(&merge)
    )
}

/// Kubernetes specifics.
#[derive(Clone, Debug)]
pub struct K8sOptions {
    /// The container image holding `apiary`.
    pub image: String,
    /// A PersistentVolumeClaim mounted at the sweep folder's path (the traces must be
    /// in the image or on it too); none: the pod sees the folder some other way.
    pub claim: Option<String>,
    /// Retries per shard (`backoffLimitPerIndex`).
    pub retries: usize,
}

/// `s` as a YAML double-quoted scalar.
fn yq(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A Kubernetes object name from the sweep's (lowercase letters, digits and `-`).
fn k8s_name(sweep: &str) -> String {
    let mut n: String = sweep
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    n = n.trim_matches('-').to_string();
    n.truncate(40);
    format!("apiary-sweep-{}", n.trim_end_matches('-'))
}

/// The Indexed Job: one completion per shard, each pod's `JOB_COMPLETION_INDEX` its
/// shard; a failing shard is retried on its own (`backoffLimitPerIndex`) and does not
/// fail the others (`maxFailedIndexes` is every shard).
pub fn k8s_job(p: &Planned, l: &Launch, o: &K8sOptions) -> String {
    let n = l.shards(p);
    let dir = p.dir.display().to_string();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Written by `apiary sweep slurm --emit k8s`: sweep '{}', {} cells in {n} shards of {}.",
        p.sweep.name,
        p.cells.len(),
        l.count
    );
    let _ = writeln!(
        s,
        "# Apply it with kubectl apply -f; then run `apiary sweep merge {dir}`."
    );
    s.push_str("apiVersion: batch/v1\nkind: Job\nmetadata:\n");
    let _ = writeln!(s, "  name: {}", k8s_name(&p.sweep.name));
    s.push_str("spec:\n  completionMode: Indexed\n");
    let _ = writeln!(s, "  completions: {n}");
    let _ = writeln!(s, "  parallelism: {}", l.parallel.unwrap_or(n).min(n));
    let _ = writeln!(s, "  backoffLimitPerIndex: {}", o.retries);
    let _ = writeln!(s, "  maxFailedIndexes: {n}");
    s.push_str("  template:\n    spec:\n      restartPolicy: Never\n      containers:\n");
    s.push_str("        - name: shard\n");
    let _ = writeln!(s, "          image: {}", yq(&o.image));
    let args: Vec<String> = l.run_args(&p.dir).iter().map(|a| yq(a)).collect();
    let _ = writeln!(s, "          command: [{}]", args.join(", "));
    let _ = writeln!(
        s,
        "          resources:\n            requests:\n              cpu: {}",
        yq(&l.threads.to_string())
    );
    if let Some(claim) = &o.claim {
        let _ = writeln!(
            s,
            "          volumeMounts:\n            - name: sweep\n              mountPath: {}",
            yq(&dir)
        );
        let _ = writeln!(
            s,
            "      volumes:\n        - name: sweep\n          persistentVolumeClaim:\n            claimName: {}",
            yq(claim)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_spaces_and_quotes() {
        assert_eq!(shell_quote("/a/b-c_d.e"), "/a/b-c_d.e");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(yq("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(k8s_name("Philly_Load v2"), "apiary-sweep-philly-load-v2");
    }
}
