//! `ipusim run --plot FILE`: the loss curve of a run as an SVG chart, drawn with `plotters`
//! (its SVG backend: no font or image library). One point per loss entry the run kept, in
//! order; the title names the program and the precision.

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
}
