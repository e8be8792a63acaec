//! Power limits (`--power-limit`): every GPU capped at a fraction of its top limit, as
//! Zeus (NSDI '23) swept them. A capped GPU trains slower and draws less; Zeus measured
//! both per network, at every limit from about 100 W to the top, on four GPU types
//! (`../shared/carbon/power/zeus_summary_power_*.csv`, Apache-2.0, ml-energy/zeus).
//!
//! [`scaling`] gives a job's time and power at a limit relative to the top limit: the
//! median over Zeus's configurations (dataset, batch size, optimiser) of that
//! configuration's ratio to its own top-limit run, linear between limits.

use crate::io;

/// (limit W, time ratio, power ratio) to the top limit, by increasing limit.
type Points = &'static [(f64, f64, f64)];

/// Zeus's sweep on one GPU type: each network's points.
struct Zeus {
    gpu: &'static str,
    top_w: f64,
    networks: &'static [(&'static str, Points)],
}

const ZEUS: &[Zeus] = &[
    Zeus {
        gpu: "V100",
        top_w: 250.0,
        networks: &[
            (
                "shufflenetv2",
                &[
                    (100.0, 1.112, 0.591),
                    (125.0, 1.083, 0.701),
                    (150.0, 1.041, 0.796),
                    (175.0, 1.031, 0.861),
                    (200.0, 1.023, 0.926),
                    (225.0, 1.012, 0.966),
                    (250.0, 1.0, 1.0),
                ],
            ),
            (
                "resnet50",
                &[
                    (100.0, 1.833, 0.447),
                    (125.0, 1.406, 0.551),
                    (150.0, 1.169, 0.654),
                    (175.0, 1.094, 0.743),
                    (200.0, 1.051, 0.831),
                    (225.0, 1.019, 0.932),
                    (250.0, 1.0, 1.0),
                ],
            ),
            (
                "deepspeech2",
                &[
                    (100.0, 1.397, 0.569),
                    (125.0, 1.191, 0.661),
                    (150.0, 1.121, 0.746),
                    (175.0, 1.057, 0.805),
                    (200.0, 1.035, 0.87),
                    (225.0, 1.012, 0.946),
                    (250.0, 1.0, 1.0),
                ],
            ),
            (
                "ncf",
                &[
                    (100.0, 0.997, 0.989),
                    (125.0, 1.005, 0.995),
                    (150.0, 0.988, 0.981),
                    (175.0, 0.978, 1.001),
                    (200.0, 1.008, 1.002),
                    (225.0, 0.986, 0.989),
                    (250.0, 1.0, 1.0),
                ],
            ),
            (
                "bert_base_uncased",
                &[
                    (100.0, 1.883, 0.446),
                    (125.0, 1.451, 0.539),
                    (150.0, 1.21, 0.646),
                    (175.0, 1.117, 0.747),
                    (200.0, 1.066, 0.835),
                    (225.0, 1.024, 0.93),
                    (250.0, 1.0, 1.0),
                ],
            ),
        ],
    },
    Zeus {
        gpu: "A40",
        top_w: 300.0,
        networks: &[
            (
                "shufflenetv2",
                &[
                    (100.0, 2.442, 0.584),
                    (125.0, 1.371, 0.645),
                    (150.0, 1.078, 0.76),
                    (175.0, 1.02, 0.819),
                    (200.0, 1.022, 0.942),
                    (225.0, 1.007, 0.99),
                    (250.0, 1.008, 0.973),
                    (275.0, 1.001, 0.998),
                    (300.0, 1.0, 1.0),
                ],
            ),
            (
                "resnet50",
                &[
                    (100.0, 2.908, 0.479),
                    (125.0, 2.376, 0.514),
                    (150.0, 1.644, 0.602),
                    (175.0, 1.181, 0.673),
                    (200.0, 1.068, 0.751),
                    (225.0, 1.022, 0.835),
                    (250.0, 1.011, 0.907),
                    (275.0, 1.005, 0.967),
                    (300.0, 1.0, 1.0),
                ],
            ),
            (
                "deepspeech2",
                &[
                    (100.0, 3.12, 0.588),
                    (125.0, 2.008, 0.642),
                    (150.0, 1.336, 0.711),
                    (175.0, 1.104, 0.779),
                    (200.0, 1.043, 0.848),
                    (225.0, 1.017, 0.919),
                    (250.0, 1.005, 0.965),
                    (275.0, 1.006, 0.99),
                    (300.0, 1.0, 1.0),
                ],
            ),
            (
                "ncf",
                &[
                    (100.0, 0.994, 0.998),
                    (125.0, 0.995, 0.996),
                    (150.0, 1.007, 0.99),
                    (175.0, 0.967, 1.008),
                    (200.0, 0.987, 0.989),
                    (225.0, 1.001, 0.991),
                    (250.0, 0.999, 1.005),
                    (275.0, 0.992, 0.993),
                    (300.0, 1.0, 1.0),
                ],
            ),
            (
                "bert_base_uncased",
                &[
                    (100.0, 4.004, 0.395),
                    (125.0, 2.615, 0.461),
                    (150.0, 1.671, 0.546),
                    (175.0, 1.301, 0.627),
                    (200.0, 1.108, 0.711),
                    (225.0, 1.057, 0.789),
                    (250.0, 1.025, 0.872),
                    (275.0, 1.005, 0.942),
                    (300.0, 1.0, 1.0),
                ],
            ),
        ],
    },
    Zeus {
        gpu: "RTX6000",
        top_w: 260.0,
        networks: &[
            (
                "shufflenetv2",
                &[
                    (100.0, 1.141, 0.597),
                    (125.0, 1.142, 0.742),
                    (150.0, 1.022, 0.855),
                    (175.0, 1.028, 0.905),
                    (200.0, 1.0, 0.948),
                    (225.0, 1.001, 0.99),
                    (250.0, 1.006, 0.988),
                    (260.0, 1.0, 1.0),
                ],
            ),
            (
                "resnet50",
                &[
                    (100.0, 2.213, 0.428),
                    (125.0, 1.385, 0.528),
                    (150.0, 1.195, 0.617),
                    (175.0, 1.105, 0.709),
                    (200.0, 1.057, 0.799),
                    (225.0, 1.026, 0.886),
                    (250.0, 1.007, 0.968),
                    (260.0, 1.0, 1.0),
                ],
            ),
            (
                "deepspeech2",
                &[
                    (100.0, 1.988, 0.505),
                    (125.0, 1.227, 0.626),
                    (150.0, 1.1, 0.707),
                    (175.0, 1.044, 0.784),
                    (200.0, 1.019, 0.865),
                    (225.0, 1.005, 0.924),
                    (250.0, 1.001, 0.978),
                    (260.0, 1.0, 1.0),
                ],
            ),
            (
                "ncf",
                &[
                    (100.0, 1.009, 1.001),
                    (125.0, 0.981, 0.998),
                    (150.0, 1.009, 1.0),
                    (175.0, 1.006, 0.996),
                    (200.0, 0.993, 0.998),
                    (225.0, 1.011, 0.998),
                    (250.0, 1.01, 0.999),
                    (260.0, 1.0, 1.0),
                ],
            ),
            (
                "bert_base_uncased",
                &[
                    (100.0, 2.433, 0.412),
                    (125.0, 1.545, 0.507),
                    (150.0, 1.277, 0.6),
                    (175.0, 1.164, 0.694),
                    (200.0, 1.084, 0.785),
                    (225.0, 1.04, 0.877),
                    (250.0, 1.013, 0.967),
                    (260.0, 1.0, 1.0),
                ],
            ),
        ],
    },
    Zeus {
        gpu: "P100",
        top_w: 250.0,
        networks: &[
            (
                "shufflenetv2",
                &[
                    (125.0, 1.012, 0.96),
                    (150.0, 1.008, 0.992),
                    (175.0, 1.004, 0.994),
                    (200.0, 1.005, 1.003),
                    (225.0, 1.0, 0.997),
                    (250.0, 1.0, 1.0),
                ],
            ),
            (
                "resnet50",
                &[
                    (125.0, 1.096, 0.717),
                    (150.0, 1.054, 0.799),
                    (175.0, 1.02, 0.91),
                    (200.0, 1.006, 0.995),
                    (225.0, 1.001, 1.02),
                    (250.0, 1.0, 1.0),
                ],
            ),
            (
                "deepspeech2",
                &[
                    (125.0, 1.099, 0.787),
                    (150.0, 1.059, 0.833),
                    (175.0, 1.036, 0.9),
                    (200.0, 1.017, 0.932),
                    (225.0, 1.002, 0.985),
                    (250.0, 1.0, 1.0),
                ],
            ),
            (
                "ncf",
                &[
                    (125.0, 1.014, 0.997),
                    (150.0, 1.004, 1.0),
                    (175.0, 1.034, 0.995),
                    (200.0, 1.003, 0.999),
                    (225.0, 1.017, 0.997),
                    (250.0, 1.0, 1.0),
                ],
            ),
            (
                "bert_base_uncased",
                &[
                    (125.0, 1.114, 0.679),
                    (150.0, 1.056, 0.785),
                    (175.0, 1.008, 0.893),
                    (200.0, 1.001, 0.979),
                    (225.0, 0.998, 1.007),
                    (250.0, 1.0, 1.0),
                ],
            ),
        ],
    },
];

/// The Zeus network a job's model is, if Zeus measured it: ResNet-50, ShuffleNet v2,
/// DeepSpeech 2 and BERT (base) by the names apiary reads (`resnet50`, `ResNet-50
/// (batch size 64)`, `shufflenet`, `deepspeech2`, `bert`), NCF by its own name.
pub fn network(model: &str) -> Option<&'static str> {
    if model.to_ascii_lowercase().starts_with("ncf") {
        return Some("ncf");
    }
    Some(match io::model(model)?.name {
        "res50" => "resnet50",
        "shufflenet" => "shufflenetv2",
        "deepspeech" => "deepspeech2",
        "bert" => "bert_base_uncased",
        _ => return None,
    })
}

/// A GPU type's sweep: its own, else the V100's (the most common training GPU of the
/// four Zeus measured).
fn sweep(gpu_type: &str) -> &'static Zeus {
    let key: String = gpu_type
        .chars()
        .filter(|c| !matches!(c, '-' | ' ' | '_'))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    ZEUS.iter().find(|z| z.gpu == key).unwrap_or(&ZEUS[0])
}

/// (time, power) ratio of `points` at `limit` W, linear between points, held at the
/// ends.
fn at(points: &[(f64, f64, f64)], limit: f64) -> (f64, f64) {
    let first = points[0];
    if limit <= first.0 {
        return (first.1, first.2);
    }
    for w in points.windows(2) {
        let (a, b) = (w[0], w[1]);
        if limit <= b.0 {
            let t = (limit - a.0) / (b.0 - a.0);
            return (a.1 + t * (b.1 - a.1), a.2 + t * (b.2 - a.2));
        }
    }
    let last = points[points.len() - 1];
    (last.1, last.2)
}

/// A job's time and power on `gpu_type` capped at `fraction` of the type's top limit,
/// each relative to the top limit: `network` (from [`network`]) if Zeus measured it,
/// else the median over Zeus's networks. A type Zeus did not sweep takes the V100's
/// ratios; a fraction below the lowest limit measured takes the lowest.
pub fn scaling(gpu_type: &str, network: Option<&str>, fraction: f64) -> (f64, f64) {
    let z = sweep(gpu_type);
    let limit = fraction.clamp(0.0, 1.0) * z.top_w;
    if let Some(points) = network.and_then(|n| z.networks.iter().find(|x| x.0 == n)) {
        return at(points.1, limit);
    }
    let mut times: Vec<f64> = Vec::with_capacity(z.networks.len());
    let mut powers: Vec<f64> = Vec::with_capacity(z.networks.len());
    for (_, points) in z.networks {
        let (t, p) = at(points, limit);
        times.push(t);
        powers.push(p);
    }
    (median(&mut times), median(&mut powers))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_reads_zeus_and_interpolates() {
        // V100 at 150 W of 250: ResNet-50 takes 1.169x as long at 0.654x the power.
        assert_eq!(scaling("V100", Some("resnet50"), 0.6), (1.169, 0.654));
        assert_eq!(
            scaling("v100", network("ResNet-50 (batch size 64)"), 1.0),
            (1.0, 1.0)
        );
        // Halfway between 150 and 175 W.
        let (t, p) = scaling("V100", Some("resnet50"), 0.65);
        assert!(
            (t - (1.169 + 1.094) / 2.0).abs() < 1e-12 && (p - (0.654 + 0.743) / 2.0).abs() < 1e-12
        );
        // Below the lowest limit measured: the lowest.
        assert_eq!(
            scaling("V100", Some("bert_base_uncased"), 0.1),
            (1.883, 0.446)
        );
        // An unmeasured network: the median of the five.
        let (t, _) = scaling("V100", None, 0.6);
        assert_eq!(t, 1.121);
        // A type Zeus did not sweep takes the V100's.
        assert_eq!(scaling("A100", Some("resnet50"), 0.6), (1.169, 0.654));
        assert_eq!(network("shufflenet"), Some("shufflenetv2"));
        assert_eq!(network("alexnet"), None);
    }
}
