//! Charts as SVG, drawn with `plotters` (its SVG backend: no font or image library):
//!
//! - `ipusim run --plot FILE`: the loss curve, one point per loss entry the run kept, in
//!   order; the title names the program and the precision;
//! - `ipusim report plot REPORT.json --memory FILE`: bytes per tile against the capacity;
//! - `ipusim report plot REPORT.json --compute-sets FILE`: the costliest compute sets' cycles.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::ops::Range;

/// A chart on an SVG string.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
/// What drawing on a chart gives.
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// An SVG chart of `size` titled `title` over `x` × `y`, its y labels `y_label_area` wide,
/// filled by `draw`; `what` names the chart in the error.
fn chart_svg(
    what: &str,
    title: &str,
    size: (u32, u32),
    y_label_area: u32,
    (x, y): (Range<f64>, Range<f64>),
    draw: impl FnOnce(&mut Chart<'_, '_>) -> Drawn,
) -> Result<String, String> {
    let mut svg = String::new();
    let drawn = (|| -> Drawn {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(y_label_area)
            .build_cartesian_2d(x, y)?;
        draw(&mut chart)?;
        root.present()?;
        Ok(())
    })();
    drawn.map_err(|e| format!("cannot draw the {what}: {e}"))?;
    Ok(svg)
}

/// The SVG of `losses` (one per kept entry) titled `title`, or why it cannot be drawn.
pub fn loss_svg(title: &str, losses: &[f64]) -> Result<String, String> {
    let finite: Vec<(f64, f64)> = losses
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_finite())
        .map(|(i, &l)| ((i + 1) as f64, l))
        .collect();
    if finite.is_empty() {
        return Err("the run kept no finite loss to plot".into());
    }
    let (lo, hi) = finite
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &(_, l)| (a.min(l), b.max(l)));
    let pad = ((hi - lo) * 0.05).max(1e-6);
    let n = losses.len().max(2) as f64;
    let ranges = (1f64..n, (lo - pad)..(hi + pad));
    chart_svg("loss curve", title, (800, 480), 60, ranges, |chart| {
        chart
            .configure_mesh()
            .label_style(("sans-serif", 12))
            .x_desc("loss entry (step)")
            .y_desc("loss")
            .draw()?;
        chart.draw_series(LineSeries::new(finite.iter().copied(), &BLUE))?;
        Ok(())
    })
}

/// Bytes of every tile (`tiles`, in tile order) as bars, with the capacity as a line.
pub fn memory_svg(title: &str, tiles: &[u64], capacity: u64) -> Result<String, String> {
    if tiles.is_empty() {
        return Err("the report has no per-tile memory (memory.tiles)".into());
    }
    let fullest = tiles.iter().copied().max().unwrap_or(0);
    let top = fullest.max(capacity).max(1) as f64 * 1.05;
    let width = tiles.len() as f64;
    chart_svg(
        "tile memory",
        title,
        (1000, 420),
        80,
        (0f64..width, 0f64..top),
        |chart| {
            chart
                .configure_mesh()
                .label_style(("sans-serif", 12))
                .x_desc("tile")
                .y_desc("bytes")
                .draw()?;
            chart.draw_series(tiles.iter().enumerate().map(|(i, &b)| {
                let colour = if b > capacity { RED } else { BLUE };
                let x = i as f64;
                Rectangle::new([(x, 0.0), (x + 1.0, b as f64)], colour.filled())
            }))?;
            let cap = capacity as f64;
            chart.draw_series(LineSeries::new([(0.0, cap), (width, cap)], &RED))?;
            Ok(())
        },
    )
}

/// The cycles of `sets` (`(name, cycles)`, costliest first) as horizontal bars.
pub fn compute_sets_svg(title: &str, sets: &[(String, u64)]) -> Result<String, String> {
    if sets.is_empty() {
        return Err("the report has no compute sets".into());
    }
    let top = sets.iter().map(|s| s.1).max().unwrap_or(0).max(1) as f64 * 1.05;
    let n = sets.len();
    let size = (1000, 120 + 18 * n as u32);
    // Room right of the longest bar for its name.
    let ranges = (0f64..top * 1.8, 0f64..n as f64);
    chart_svg("compute sets", title, size, 10, ranges, |chart| {
        chart
            .configure_mesh()
            .y_labels(0)
            .label_style(("sans-serif", 12))
            .x_desc("cycles")
            .disable_y_mesh()
            .draw()?;
        chart.draw_series(sets.iter().enumerate().map(|(i, (_, c))| {
            let y = (n - 1 - i) as f64;
            Rectangle::new([(0.0, y + 0.15), (*c as f64, y + 0.85)], BLUE.filled())
        }))?;
        // Each bar's name just right of it.
        chart.draw_series(sets.iter().enumerate().map(|(i, (name, c))| {
            let y = (n - 1 - i) as f64 + 0.75;
            Text::new(format!(" {name}"), (*c as f64, y), ("sans-serif", 12))
        }))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_curve_draws_its_points() {
        let svg = loss_svg("t", &[2.3, 1.5, f64::NAN, 0.75]).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{svg}"
        );
        assert!(loss_svg("t", &[f64::NAN]).is_err());
    }

    #[test]
    fn memory_and_compute_set_charts_draw_a_bar_each() {
        let svg = memory_svg("m", &[10, 20, 50], 40).unwrap();
        assert_eq!(
            svg.matches("<rect").count() - 1,
            3,
            "a bar per tile and the background"
        );
        assert!(svg.contains("#FF0000"), "the tile over capacity is red");
        let sets = vec![("a".to_string(), 30), ("b".to_string(), 10)];
        let svg = compute_sets_svg("c", &sets).unwrap();
        assert!(svg.contains("\n a\n") && svg.contains("\n b\n"), "{svg}");
        assert!(memory_svg("m", &[], 1).is_err());
    }
}
