//! Carbon-intensity series for `--carbon GRID|FILE`: the six EIA-930 2022 grids apiary
//! ships (`data/carbon/`), or a CSV of hourly values.
//!
//! A file is a CSV with a header; its intensity column is `avg_CI` (EIA-930 as
//! `../shared/carbon` has it), `g_per_kwh` or `intensity`, in gCO2eq/kWh, one row per
//! hour. A `timestamp` column, where present, must step by exactly one hour. Missing
//! values (empty cells) are filled from the hour before (the first from the first value
//! given), and the series reports how many were.

use crate::TraceError;
use apiary_model::energy::Intensity;
use std::path::Path;

/// The grids apiary ships, with their series.
const GRIDS: &[(&str, &str)] = &[
    ("BPAT", include_str!("../data/carbon/BPAT.txt")),
    ("CISO", include_str!("../data/carbon/CISO.txt")),
    ("ERCO", include_str!("../data/carbon/ERCO.txt")),
    ("MISO", include_str!("../data/carbon/MISO.txt")),
    ("NYIS", include_str!("../data/carbon/NYIS.txt")),
    ("PJM", include_str!("../data/carbon/PJM.txt")),
];

/// The names of the grids apiary ships.
pub fn grids() -> impl Iterator<Item = &'static str> {
    GRIDS.iter().map(|g| g.0)
}

/// `spec`: a grid's name (any case) or a CSV file.
pub fn read_intensity(spec: &str) -> Result<Intensity, TraceError> {
    if let Some((name, text)) = GRIDS.iter().find(|g| g.0.eq_ignore_ascii_case(spec)) {
        let mut values = Vec::with_capacity(8760);
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            values.push(l.trim().parse::<f64>().ok());
        }
        let (hourly, filled) = fill(values);
        return Ok(Intensity::new(
            format!("{name} (EIA-930 2022)"),
            hourly,
            filled,
        ));
    }
    let path = Path::new(spec);
    if !path.exists() {
        let known: Vec<&str> = grids().collect();
        return Err(TraceError::Option {
            option: "--carbon".into(),
            message: format!(
                "'{spec}' is neither a grid ({}) nor a file",
                known.join(", ")
            ),
        });
    }
    read_file(path)
}

/// Fills each missing value from the one before (leading gaps from the first given).
fn fill(values: Vec<Option<f64>>) -> (Vec<f64>, usize) {
    let first = values.iter().flatten().next().copied();
    let mut last = first;
    let mut filled = 0;
    let out = values
        .into_iter()
        .filter_map(|v| {
            if v.is_none() {
                filled += 1;
            }
            last = v.or(last);
            last
        })
        .collect();
    (out, filled)
}

fn read_file(path: &Path) -> Result<Intensity, TraceError> {
    let file = path.display().to_string();
    let row_err = |line: u64, field: &str, message: String| TraceError::Row {
        file: file.clone(),
        line,
        field: field.into(),
        message,
    };
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .map_err(|e| match e.into_kind() {
            csv::ErrorKind::Io(source) => TraceError::Io {
                file: file.clone(),
                source,
            },
            other => row_err(1, "header", format!("{other:?}")),
        })?;
    let header = r
        .headers()
        .map_err(|e| row_err(1, "header", e.to_string()))?
        .clone();
    let col = |names: &[&str]| header.iter().position(|h| names.contains(&h.trim()));
    let Some(v) = col(&["avg_CI", "g_per_kwh", "intensity"]) else {
        return Err(row_err(
            1,
            "header",
            "no intensity column (avg_CI, g_per_kwh or intensity)".into(),
        ));
    };
    let ts = col(&["timestamp"]);
    let mut values = Vec::new();
    let mut prev: Option<i64> = None;
    let mut first: Option<i64> = None;
    for (i, rec) in r.records().enumerate() {
        let line = i as u64 + 2;
        let rec = rec.map_err(|e| row_err(line, "row", e.to_string()))?;
        let cell = rec.get(v).unwrap_or("").trim();
        let value = if cell.is_empty() {
            None
        } else {
            let x: f64 = cell
                .parse()
                .map_err(|_| row_err(line, &header[v], format!("'{cell}' is not a number")))?;
            if !(x.is_finite() && x >= 0.0) {
                return Err(row_err(
                    line,
                    &header[v],
                    format!("{x} is not an intensity in g/kWh"),
                ));
            }
            Some(x)
        };
        if let Some(t) = ts {
            let cell = rec.get(t).unwrap_or("").trim();
            // EIA-930 writes UTC as `+00:00`.
            let utc = cell
                .strip_suffix("+00:00")
                .or_else(|| cell.strip_suffix('Z'))
                .unwrap_or(cell);
            let secs = crate::dates::parse_datetime(utc)
                .map_err(|m| row_err(line, "timestamp", format!("{m} (UTC)")))?;
            if let Some(p) = prev
                && secs - p != 3600
            {
                return Err(row_err(
                    line,
                    "timestamp",
                    format!(
                        "{cell} is {} s after the row before; rows must be hourly",
                        secs - p
                    ),
                ));
            }
            prev = Some(secs);
            first = first.or(Some(secs));
        }
        values.push(value);
    }
    if values.iter().all(Option::is_none) {
        return Err(row_err(1, &header[v], "no values".into()));
    }
    let (hourly, filled) = fill(values);
    let mut s = Intensity::new(file.clone(), hourly, filled);
    s.stamped = first.and_then(|t| u64::try_from(t).ok()).map(|t| t * 1000);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_grids_have_a_year_with_their_gaps_filled() {
        let c = read_intensity("ciso").unwrap();
        assert_eq!(c.hours(), 8760);
        assert_eq!(c.filled, 3);
        assert!((c.mean() - 256.19).abs() < 0.05, "{}", c.mean());
        assert_eq!(read_intensity("PJM").unwrap().filled, 23);
        let e = read_intensity("CISSO").unwrap_err().to_string();
        assert!(e.contains("--carbon") && e.contains("CISO"), "{e}");
    }

    #[test]
    fn files_are_checked_by_line_and_field() {
        let d = std::env::temp_dir().join(format!("apiary-carbon-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let ok = d.join("ok.csv");
        std::fs::write(
            &ok,
            "timestamp,g_per_kwh\n2022-01-01 00:00:00+00:00,\n2022-01-01 01:00:00+00:00,100\n2022-01-01 02:00:00+00:00,\n2022-01-01 03:00:00+00:00,300\n",
        )
        .unwrap();
        let s = read_intensity(ok.to_str().unwrap()).unwrap();
        assert_eq!((s.hours(), s.filled, s.mean()), (4, 2, 150.0));
        assert_eq!(s.stamped, Some(1_640_995_200_000));
        let gap = d.join("gap.csv");
        std::fs::write(
            &gap,
            "timestamp,avg_CI\n2022-01-01 00:00:00,1\n2022-01-01 02:00:00,2\n",
        )
        .unwrap();
        let e = read_intensity(gap.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 3") && e.contains("timestamp") && e.contains("hourly"),
            "{e}"
        );
        let bad = d.join("bad.csv");
        std::fs::write(&bad, "intensity\n12\n-3\n").unwrap();
        let e = read_intensity(bad.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("'intensity'"), "{e}");
        let none = d.join("none.csv");
        std::fs::write(&none, "time,power\n1,2\n").unwrap();
        let e = read_intensity(none.to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no intensity column"), "{e}");
    }
}
