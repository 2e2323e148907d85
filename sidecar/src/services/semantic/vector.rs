//! Vector arithmetic of the semantic store: L2 normalization once at the door, so every
//! similarity afterwards is a plain dot product.

/// `v` scaled to unit length; `None` when it cannot be (empty, zero, or not finite), since
/// such a vector has no direction to compare.
pub fn normalized(mut v: Vec<f32>) -> Option<Box<[f32]>> {
    if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    // Summed in f64: 384+ squares in f32 lose digits that the 4th decimal of a cosine shows.
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    if norm < f64::from(f32::MIN_POSITIVE) {
        return None;
    }
    for x in &mut v {
        *x = (f64::from(*x) / norm) as f32;
    }
    Some(v.into_boxed_slice())
}

/// Cosine similarity of two unit vectors (their dot product); `None` when their dimensions
/// differ (vectors of different models are never comparable). Cost: one multiply-add per
/// dimension.
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    (a.len() == b.len()).then(|| a.iter().zip(b).map(|(x, y)| x * y).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_to_unit_length() {
        let v = normalized(vec![3.0, 4.0]).unwrap();
        assert_eq!(&*v, &[0.6, 0.8]);
        assert!((cosine(&v, &v).unwrap() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn refuses_vectors_without_direction() {
        assert!(normalized(vec![]).is_none());
        assert!(normalized(vec![0.0, 0.0]).is_none());
        assert!(normalized(vec![1.0, f32::NAN]).is_none());
        assert!(normalized(vec![f32::INFINITY, 1.0]).is_none());
    }

    #[test]
    fn cosine_of_unit_vectors() {
        let a = normalized(vec![1.0, 0.0]).unwrap();
        let b = normalized(vec![1.0, 1.0]).unwrap();
        let c = normalized(vec![-2.0, 0.0]).unwrap();
        assert!((cosine(&a, &b).unwrap() - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert!((cosine(&a, &c).unwrap() + 1.0).abs() < 1e-6);
        // Scale does not matter once normalized.
        let d = normalized(vec![100.0, 100.0]).unwrap();
        assert!((cosine(&b, &d).unwrap() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn different_dimensions_never_compare() {
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), None);
    }
}
