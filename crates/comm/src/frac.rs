//! Exact non-negative fractions for cut ratios, bandwidths and tree scales.
//!
//! ForestColl's optimum is a ratio of small integers (GPUs in a cut over the capacity
//! leaving it), and the schedule's `(U, k)` come from its exact numerator and
//! denominator, so floating point is not good enough. Values here stay far from `u128`'s
//! range: numerators are node counts times capacities.

use std::cmp::Ordering;
use std::fmt;

/// A fraction `num / den` in lowest terms, `den > 0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frac {
    num: u128,
    den: u128,
}

/// Greatest common divisor (`gcd(0, 0) = 0`).
pub fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Frac {
    /// Zero.
    pub const ZERO: Frac = Frac { num: 0, den: 1 };

    /// `num / den` reduced. Panics on `den == 0` (a caller bug).
    pub fn new(num: u128, den: u128) -> Frac {
        assert!(den != 0, "fraction with zero denominator");
        let g = gcd(num, den).max(1);
        Frac {
            num: num / g,
            den: den / g,
        }
    }

    /// The integer `n`.
    pub fn int(n: u128) -> Frac {
        Frac { num: n, den: 1 }
    }

    /// Numerator (lowest terms).
    pub fn num(self) -> u128 {
        self.num
    }

    /// Denominator (lowest terms).
    pub fn den(self) -> u128 {
        self.den
    }

    /// Nearest `f64`.
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// `self · other`.
    pub fn times(self, other: Frac) -> Frac {
        let a = Frac::new(self.num, other.den);
        let b = Frac::new(other.num, self.den);
        Frac::new(a.num * b.num, a.den * b.den)
    }

    /// `self / other`. Panics when `other` is zero.
    pub fn over(self, other: Frac) -> Frac {
        self.times(Frac::new(other.den, other.num))
    }

    /// `self + other`.
    pub fn plus(self, other: Frac) -> Frac {
        let g = gcd(self.den, other.den);
        let l = self.den / g * other.den;
        Frac::new(self.num * (l / self.den) + other.num * (l / other.den), l)
    }

    /// Parses a non-negative decimal such as `12.5` or `300` exactly (no exponent).
    pub fn parse_decimal(s: &str) -> Option<Frac> {
        let s = s.trim();
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
            || frac.len() > 12
            || int.len() > 18
        {
            return None;
        }
        let digits = format!("{int}{frac}");
        let num: u128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        Some(Frac::new(num, 10u128.pow(frac.len() as u32)))
    }

    /// An exact fraction for a finite non-negative `f64` written in decimal: the value
    /// its shortest round-trip decimal spells (`0.1` is 1/10, not the binary double).
    pub fn from_f64_decimal(x: f64) -> Option<Frac> {
        if !x.is_finite() || x < 0.0 {
            return None;
        }
        Frac::parse_decimal(&format!("{x}"))
    }
}

impl Ord for Frac {
    fn cmp(&self, other: &Frac) -> Ordering {
        (self.num * other.den).cmp(&(other.num * self.den))
    }
}

impl PartialOrd for Frac {
    fn partial_cmp(&self, other: &Frac) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Frac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

impl serde::Serialize for Frac {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_stays_exact() {
        let a = Frac::new(3, 65);
        assert_eq!(a.to_string(), "3/65");
        assert_eq!(a.times(Frac::int(65)), Frac::int(3));
        assert_eq!(Frac::new(1, 3).plus(Frac::new(1, 6)), Frac::new(1, 2));
        assert_eq!(Frac::new(3, 4).over(Frac::new(3, 2)), Frac::new(1, 2));
        assert!(Frac::new(2, 5) > Frac::new(3, 10));
        assert_eq!(Frac::parse_decimal("12.5"), Some(Frac::new(25, 2)));
        assert_eq!(Frac::from_f64_decimal(0.1), Some(Frac::new(1, 10)));
        assert_eq!(Frac::parse_decimal("-1"), None);
        assert_eq!(Frac::parse_decimal("1e3"), None);
        assert_eq!(Frac::from_f64_decimal(f64::NAN), None);
    }
}
