//! `apiary hived`: replay HiveD algorithm calls and print cell status.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use apiary_hived::replay::{self, ConfigRef, Scenario};
use apiary_hived::{Config, Hived};

fn read_config(path: &Path) -> Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Config::parse(&text).with_context(|| format!("{}", path.display()))
}

/// `apiary hived replay SCENARIO [--inspect-each-step]`: one JSON line per step.
pub fn replay(scenario: &Path, inspect: bool) -> Result<()> {
    let text = std::fs::read_to_string(scenario)
        .with_context(|| format!("reading {}", scenario.display()))?;
    // Data-driven test files carry expectations after a `----` line; replay only the part
    // before it.
    let body = text
        .split_once("\n----\n")
        .map_or(text.as_str(), |(a, _)| a);
    let s = Scenario::parse(body).with_context(|| format!("{}", scenario.display()))?;
    let base: PathBuf = scenario.parent().map(Path::to_path_buf).unwrap_or_default();
    let load = move |r: &ConfigRef| -> Result<Config, String> {
        match r {
            ConfigRef::Inline(c) => Ok((**c).clone()),
            ConfigRef::Path(p) => read_config(&base.join(p)).map_err(|e| format!("{e:#}")),
        }
    };
    let lines =
        replay::run(&s, &load, inspect).with_context(|| format!("{}", scenario.display()))?;
    let mut out = String::new();
    for l in lines {
        out.push_str(&serde_json::to_string(&l)?);
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

/// `apiary hived status CONFIG [--json] [--vc VC]`: cell status at start-up (all nodes
/// healthy), as a table or as HiveD's inspect JSON.
pub fn status(config: &Path, json: bool, vc: Option<&str>) -> Result<()> {
    let cfg = read_config(config)?;
    let h = Hived::with_all_nodes_healthy(&cfg).with_context(|| format!("{}", config.display()))?;
    if json {
        let v = match vc {
            Some(name) => match h.virtual_cluster_status(name) {
                Some(s) => serde_json::to_value(s)?,
                None => bail!("VC {name} is not in {}", config.display()),
            },
            None => serde_json::to_value(h.cluster_status())?,
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", table(&h, vc)?);
    Ok(())
}

fn table(h: &Hived, vc: Option<&str>) -> Result<String> {
    use std::fmt::Write;
    let s = h.cluster_status();
    let mut out = String::new();
    if vc.is_none() {
        writeln!(
            out,
            "{:<44} {:<26} {:>9} {:>8} {:>5}  VC",
            "PHYSICAL CELL", "TYPE", "STATE", "HEALTH", "PRIO"
        )?;
        for c in &s.physical_cluster {
            walk(&mut out, c, 0, 2)?;
        }
        out.push('\n');
    }
    writeln!(
        out,
        "{:<44} {:<26} {:>9} {:>8} {:>5}  BOUND TO",
        "VIRTUAL CELL", "TYPE", "STATE", "HEALTH", "PRIO"
    )?;
    for (name, cells) in &s.virtual_clusters {
        if vc.is_some_and(|v| v != name) {
            continue;
        }
        for c in cells {
            walk(&mut out, c, 0, 1)?;
        }
    }
    if let Some(v) = vc
        && !s.virtual_clusters.contains_key(v)
    {
        bail!("VC {v} is not in the config");
    }
    Ok(out)
}

/// Prints a cell and its children down to `depth` levels below it.
fn walk(
    out: &mut String,
    c: &apiary_hived::inspect::CellStatus,
    indent: usize,
    depth: usize,
) -> Result<()> {
    use std::fmt::Write;
    let bound =
        c.vc.clone()
            .or_else(|| c.physical_cell.as_ref().map(|p| p.cell_address.clone()))
            .unwrap_or_default();
    writeln!(
        out,
        "{:<44} {:<26} {:>9} {:>8} {:>5}  {}",
        format!("{}{}", "  ".repeat(indent), c.cell_address),
        c.cell_type,
        format!("{:?}", c.cell_state),
        c.cell_healthiness,
        c.cell_priority,
        bound
    )?;
    if depth > 0 {
        for ch in &c.cell_children {
            walk(out, ch, indent + 1, depth - 1)?;
        }
    }
    Ok(())
}
