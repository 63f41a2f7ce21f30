//! Fixed-decimal rounding and formatting of the numbers a report writes, so that `summary.json`, the CSV
//! files and the tables never show float noise and are a function of the run only.

use softib_fabric::time::Picos;

/// Rounds to `digits` decimals, so that JSON and tables never show float noise.
pub fn round(x: f64, digits: i32) -> f64 {
    if !x.is_finite() {
        return 0.0;
    }
    let m = 10f64.powi(digits);
    let r = (x * m).round() / m;
    // -0.0 prints as "-0.0": normalise.
    if r == 0.0 {
        0.0
    } else {
        r
    }
}

/// `t` picoseconds as microseconds with six decimals, exactly.
pub fn us(t: Picos) -> String {
    format!("{}.{:06}", t / 1_000_000, t % 1_000_000)
}
