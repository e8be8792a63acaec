//! Alibaba's GPU v2023 trace ("openb") as GPU-sharing data: every pod of a pod list,
//! CPU-only ones too, with its CPU, memory, GPU count, thousandths of each GPU, GPU-type
//! constraint, QoS and times; and the node lists (`openb_node_list_*.csv`) as clusters.
//!
//! The job reader ([`crate::read`]) turns the same pod lists into whole-GPU jobs for the
//! training policies; these readers keep what GPU sharing needs and drop nothing.

use crate::TraceError;
use apiary_model::CompactString;
use apiary_model::share::{GpuNode, MAX_GPUS_PER_NODE, MILLI, Pod, Qos};
use csv::StringRecord;
use std::path::Path;

/// Every pod of an openb pod list, in file order.
pub fn read_pods(path: &Path) -> Result<Vec<Pod>, TraceError> {
    let file = path.display().to_string();
    let mut rd = reader(path)?;
    let h = header(&mut rd, &file)?;
    let col = |n: &str| column(&h, n, &file);
    let (nm, cpu, mem, ng, gm) = (
        col("name")?,
        col("cpu_milli")?,
        col("memory_mib")?,
        col("num_gpu")?,
        col("gpu_milli")?,
    );
    let opt = |n: &str| h.iter().position(|c| c == n);
    let (spec, qos, ct, dt) = (
        opt("gpu_spec"),
        opt("qos"),
        opt("creation_time"),
        opt("deletion_time"),
    );
    let mut pods = Vec::new();
    let mut rec = StringRecord::new();
    loop {
        let row = Row::next(&mut rd, &mut rec, &file)?;
        let Some(r) = row else { break };
        let num_gpu = r.int(ng, "num_gpu", MAX_GPUS_PER_NODE as u64)? as u8;
        let gpu_milli = r.int(gm, "gpu_milli", u64::from(MILLI))? as u32;
        if num_gpu > 1 && gpu_milli < MILLI {
            return Err(r.err(
                "gpu_milli",
                format!("{gpu_milli} of each of {num_gpu} GPUs: only a one-GPU pod shares"),
            ));
        }
        if num_gpu > 0 && gpu_milli == 0 {
            return Err(r.err("gpu_milli", "0 for a pod with GPUs"));
        }
        let gpu_spec = match spec.and_then(|i| r.text(i)) {
            Some(s) => s
                .split('|')
                .filter(|t| !t.is_empty())
                .map(CompactString::from)
                .collect(),
            None => Vec::new(),
        };
        let qos = match qos.and_then(|i| r.text(i)) {
            None => None,
            Some(q) => Some(Qos::parse(q).ok_or_else(|| {
                r.err(
                    "qos",
                    format!("'{q}': one of LS, BE, Burstable, Guaranteed, or empty"),
                )
            })?),
        };
        let time = |i: Option<usize>, f: &str| -> Result<Option<u64>, TraceError> {
            match i {
                Some(i) if r.text(i).is_some() => r.int(i, f, u64::MAX).map(Some),
                _ => Ok(None),
            }
        };
        let (creation, deletion) = (time(ct, "creation_time")?, time(dt, "deletion_time")?);
        if let (Some(c), Some(d)) = (creation, deletion)
            && d < c
        {
            return Err(r.err("deletion_time", format!("{d} is before creation_time {c}")));
        }
        pods.push(Pod {
            name: r.text(nm).unwrap_or("").into(),
            cpu_milli: r.int(cpu, "cpu_milli", u64::from(u32::MAX))? as u32,
            mem_mib: r.int(mem, "memory_mib", u64::from(u32::MAX))? as u32,
            num_gpu,
            gpu_milli: if num_gpu == 0 { 0 } else { gpu_milli },
            gpu_spec,
            qos,
            creation,
            deletion,
        });
    }
    Ok(pods)
}

/// Every node of an openb node list (`sn,cpu_milli,memory_mib,gpu,model`), in file order.
pub fn read_nodes(path: &Path) -> Result<Vec<GpuNode>, TraceError> {
    let file = path.display().to_string();
    let mut rd = reader(path)?;
    let h = header(&mut rd, &file)?;
    let col = |n: &str| column(&h, n, &file);
    let (sn, cpu, mem, gpu, model) = (
        col("sn")?,
        col("cpu_milli")?,
        col("memory_mib")?,
        col("gpu")?,
        col("model")?,
    );
    let mut nodes = Vec::new();
    let mut rec = StringRecord::new();
    while let Some(r) = Row::next(&mut rd, &mut rec, &file)? {
        let gpus = r.int(gpu, "gpu", MAX_GPUS_PER_NODE as u64)? as u8;
        let gpu_type: CompactString = r.text(model).unwrap_or("").into();
        if gpus > 0 && gpu_type.is_empty() {
            return Err(r.err("model", "empty for a node with GPUs"));
        }
        nodes.push(GpuNode {
            name: r.text(sn).unwrap_or("").into(),
            cpu_milli: r.int(cpu, "cpu_milli", u64::from(u32::MAX))? as u32,
            mem_mib: r.int(mem, "memory_mib", u64::from(u32::MAX))? as u32,
            gpus,
            gpu_type,
        });
    }
    Ok(nodes)
}

/// Whether a CSV header is an openb node list's.
pub fn is_node_list(first_line: &str) -> bool {
    let cols: Vec<&str> = first_line.trim().split(',').collect();
    ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
        .iter()
        .all(|c| cols.contains(c))
}

type Reader = csv::Reader<Box<dyn std::io::BufRead>>;

fn reader(path: &Path) -> Result<Reader, TraceError> {
    Ok(csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(crate::open::open(path)?))
}

fn header(rd: &mut Reader, file: &str) -> Result<StringRecord, TraceError> {
    let mut h = StringRecord::new();
    match rd.read_record(&mut h) {
        Ok(true) => Ok(h),
        Ok(false) => Err(TraceError::Row {
            file: file.into(),
            line: 1,
            field: "header".into(),
            message: "empty file".into(),
        }),
        Err(e) => Err(csv_err(file, 1, e)),
    }
}

fn column(h: &StringRecord, name: &str, file: &str) -> Result<usize, TraceError> {
    h.iter()
        .position(|c| c == name)
        .ok_or_else(|| TraceError::Row {
            file: file.into(),
            line: 1,
            field: name.into(),
            message: format!(
                "no such column (header: {})",
                h.iter().collect::<Vec<_>>().join(",")
            ),
        })
}

fn csv_err(file: &str, line: u64, e: csv::Error) -> TraceError {
    TraceError::Row {
        file: file.into(),
        line: e.position().map_or(line, |p| p.line()),
        field: "row".into(),
        message: e.to_string(),
    }
}

/// One record, with what its errors must name.
struct Row<'a> {
    rec: &'a StringRecord,
    file: &'a str,
    line: u64,
}

impl<'a> Row<'a> {
    fn next(
        rd: &mut Reader,
        rec: &'a mut StringRecord,
        file: &'a str,
    ) -> Result<Option<Row<'a>>, TraceError> {
        match rd.read_record(rec) {
            Ok(false) => Ok(None),
            Ok(true) => Ok(Some(Row {
                line: rec.position().map_or(0, |p| p.line()),
                rec,
                file,
            })),
            Err(e) => Err(csv_err(file, 0, e)),
        }
    }

    fn err(&self, field: &str, message: impl Into<String>) -> TraceError {
        TraceError::Row {
            file: self.file.into(),
            line: self.line,
            field: field.into(),
            message: message.into(),
        }
    }

    /// The field's text, `None` when empty or missing.
    fn text(&self, i: usize) -> Option<&'a str> {
        self.rec.get(i).map(str::trim).filter(|s| !s.is_empty())
    }

    fn int(&self, i: usize, field: &str, max: u64) -> Result<u64, TraceError> {
        let s = self
            .text(i)
            .ok_or_else(|| self.err(field, "empty; a whole number is needed"))?;
        let v: u64 = s
            .parse()
            .map_err(|_| self.err(field, format!("'{s}' is not a whole number")))?;
        if v > max {
            return Err(self.err(field, format!("{v} is over the most allowed, {max}")));
        }
        Ok(v)
    }
}
