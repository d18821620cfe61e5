//! Charts as SVG, drawn with `plotters` (its SVG backend: no font or image library):
//!
//! - `ipusim run --plot FILE`: the loss curve, one point per loss entry the run kept, in
//!   order; the title names the program and the precision;
//! - `ipusim report plot REPORT.json --memory FILE`: bytes per tile against the capacity;
//! - `ipusim report plot REPORT.json --compute-sets FILE`: the costliest compute sets' cycles.

use plotters::prelude::*;

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
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 480)).into_drawing_area();
        let fail = |e: &dyn std::fmt::Display| format!("cannot draw the loss curve: {e}");
        root.fill(&WHITE).map_err(|e| fail(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(1f64..n, (lo - pad)..(hi + pad))
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", 12))
            .x_desc("loss entry (step)")
            .y_desc("loss")
            .draw()
            .map_err(|e| fail(&e))?;
        chart
            .draw_series(LineSeries::new(finite.iter().copied(), &BLUE))
            .map_err(|e| fail(&e))?;
        root.present().map_err(|e| fail(&e))?;
    }
    Ok(svg)
}

/// Bytes of every tile (`tiles`, in tile order) as bars, with the capacity as a line.
pub fn memory_svg(title: &str, tiles: &[u64], capacity: u64) -> Result<String, String> {
    if tiles.is_empty() {
        return Err("the report has no per-tile memory (memory.tiles)".into());
    }
    let top = tiles
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(capacity)
        .max(1) as f64
        * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 420)).into_drawing_area();
        let fail = |e: &dyn std::fmt::Display| format!("cannot draw the tile memory: {e}");
        root.fill(&WHITE).map_err(|e| fail(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..tiles.len() as f64, 0f64..top)
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .label_style(("sans-serif", 12))
            .x_desc("tile")
            .y_desc("bytes")
            .draw()
            .map_err(|e| fail(&e))?;
        chart
            .draw_series(tiles.iter().enumerate().map(|(i, &b)| {
                let colour = if b > capacity { RED } else { BLUE };
                Rectangle::new(
                    [(i as f64, 0.0), (i as f64 + 1.0, b as f64)],
                    colour.filled(),
                )
            }))
            .map_err(|e| fail(&e))?;
        chart
            .draw_series(LineSeries::new(
                [
                    (0.0, capacity as f64),
                    (tiles.len() as f64, capacity as f64),
                ],
                &RED,
            ))
            .map_err(|e| fail(&e))?;
        root.present().map_err(|e| fail(&e))?;
    }
    Ok(svg)
}

/// The cycles of `sets` (`(name, cycles)`, costliest first) as horizontal bars.
pub fn compute_sets_svg(title: &str, sets: &[(String, u64)]) -> Result<String, String> {
    if sets.is_empty() {
        return Err("the report has no compute sets".into());
    }
    let top = sets.iter().map(|s| s.1).max().unwrap_or(0).max(1) as f64 * 1.05;
    let n = sets.len();
    let mut svg = String::new();
    {
        let height = 120 + 18 * n as u32;
        let root = SVGBackend::with_string(&mut svg, (1000, height)).into_drawing_area();
        let fail = |e: &dyn std::fmt::Display| format!("cannot draw the compute sets: {e}");
        root.fill(&WHITE).map_err(|e| fail(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(10)
            .build_cartesian_2d(0f64..top * 1.8, 0f64..n as f64)
            .map_err(|e| fail(&e))?;
        chart
            .configure_mesh()
            .y_labels(0)
            .label_style(("sans-serif", 12))
            .x_desc("cycles")
            .disable_y_mesh()
            .draw()
            .map_err(|e| fail(&e))?;
        chart
            .draw_series(sets.iter().enumerate().map(|(i, (_, c))| {
                let y = (n - 1 - i) as f64;
                Rectangle::new([(0.0, y + 0.15), (*c as f64, y + 0.85)], BLUE.filled())
            }))
            .map_err(|e| fail(&e))?;
        // Each bar's name just right of it.
        chart
            .draw_series(sets.iter().enumerate().map(|(i, (name, c))| {
                let y = (n - 1 - i) as f64 + 0.75;
                Text::new(format!(" {name}"), (*c as f64, y), ("sans-serif", 12))
            }))
            .map_err(|e| fail(&e))?;
        root.present().map_err(|e| fail(&e))?;
    }
    Ok(svg)
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
