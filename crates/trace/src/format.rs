//! The trace formats apiary reads, by name and by the first line of a file.

/// A trace format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// apiary's canonical CSV (times in seconds).
    Apiary,
    /// apiary's canonical JSON lines (same fields).
    Jsonl,
    /// Philly per-job summary (`philly.csv`, Pollux artifact).
    Philly,
    /// Gavel per-VC trace, 7 tab-separated fields.
    Gavel,
    /// Gavel physical-cluster trace, 10 tab-separated fields.
    Gavel10,
    /// Microsoft ITP raw (`job_id,submission_time,duration,num_gpu`).
    Itp,
    /// ITP with ElasticFlow's generated fields (`…,deadline,batch_size,num_gpu,duration`).
    ItpElasticflow,
    /// ElasticFlow's own CSV (`job_id,submit_time,…,ddl,…`).
    Elasticflow,
    /// Muri CSV (milliseconds, stage times).
    Muri,
    /// Tiresias CSV (seconds).
    Tiresias,
    /// Pollux workload (`name,time,application,num_replicas,batch_size`).
    Pollux,
    /// Alibaba GPU v2023 pod list.
    Alibaba,
}

const ALL: [(Format, &str); 12] = [
    (Format::Apiary, "apiary"),
    (Format::Jsonl, "jsonl"),
    (Format::Philly, "philly"),
    (Format::Gavel, "gavel"),
    (Format::Gavel10, "gavel10"),
    (Format::Itp, "itp"),
    (Format::ItpElasticflow, "itp-elasticflow"),
    (Format::Elasticflow, "elasticflow"),
    (Format::Muri, "muri"),
    (Format::Tiresias, "tiresias"),
    (Format::Pollux, "pollux"),
    (Format::Alibaba, "alibaba"),
];

impl Format {
    /// Parses a format name.
    pub fn parse(s: &str) -> Option<Format> {
        ALL.iter().find(|(_, n)| *n == s).map(|(f, _)| *f)
    }
    /// The name.
    pub fn name(self) -> &'static str {
        ALL.iter().find(|(f, _)| *f == self).map_or("?", |(_, n)| n)
    }
    /// Every format name.
    pub fn names() -> String {
        ALL.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(", ")
    }

    /// The column (or JSON field) that holds job ids; `None` for formats that number
    /// their rows instead.
    pub(crate) fn id_field(self) -> Option<&'static str> {
        match self {
            Format::Apiary | Format::Jsonl => Some("id"),
            Format::Pollux | Format::Alibaba => Some("name"),
            Format::Philly | Format::Gavel | Format::Gavel10 => None,
            _ => Some("job_id"),
        }
    }

    /// Whether a row's job depends on its text and line number alone, so that pieces of
    /// a file can be parsed apart. Gavel's rows are numbered by the jobs before them.
    pub(crate) fn rows_independent(self) -> bool {
        !matches!(self, Format::Gavel | Format::Gavel10)
    }

    /// Recognises a format from a file's first line.
    pub fn detect(first: &str) -> Option<Format> {
        let t = first.trim();
        if t.starts_with('{') {
            return Some(Format::Jsonl);
        }
        if t.contains('\t') {
            return match t.split('\t').count() {
                7 => Some(Format::Gavel),
                10 => Some(Format::Gavel10),
                _ => None,
            };
        }
        let h: Vec<&str> = t.split(',').map(str::trim).collect();
        let has = |c: &str| h.contains(&c);
        if h.first() == Some(&"id") && has("submit") && has("gpus") && has("duration") {
            Some(Format::Apiary)
        } else if h == ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"] {
            Some(Format::Philly)
        } else if has("resource_time_0") && has("iteration_time") {
            Some(Format::Muri)
        } else if has("submission_time") && has("deadline") {
            Some(Format::ItpElasticflow)
        } else if has("submission_time") && has("num_gpu") {
            Some(Format::Itp)
        } else if has("ddl") && has("submit_time") {
            Some(Format::Elasticflow)
        } else if has("submit_time") && has("num_gpu") && has("duration") && has("model_name") {
            Some(Format::Tiresias)
        } else if h == ["name", "time", "application", "num_replicas", "batch_size"] {
            Some(Format::Pollux)
        } else if has("gpu_milli") && has("creation_time") {
            Some(Format::Alibaba)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn detects_headers() {
        assert_eq!(
            Format::detect("timestamp,duration,num_gpus,gpu_time,cluster"),
            Some(Format::Philly)
        );
        assert_eq!(
            Format::detect("job_id,submission_time,duration,num_gpu"),
            Some(Format::Itp)
        );
        assert_eq!(
            Format::detect("job_id,num_gpu,submit_time,iterations,model_name,duration,interval"),
            Some(Format::Tiresias)
        );
        assert_eq!(Format::detect("a\tb\tc\td\te\tf\tg"), Some(Format::Gavel));
        assert_eq!(Format::detect("hello,world"), None);
    }
}
