//! The request time of a signature, `YYYYMMDDTHHMMSSZ` in UTC: the `x-amz-date` header and, by
//! its first eight characters, the day of the credential scope.

use super::SigV4Error;

/// A SigV4 timestamp. Built from the caller's clock ([`AmzDate::from_unix_seconds`]) or parsed;
/// always 16 ASCII characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmzDate(String);

impl AmzDate {
    /// The UTC time `secs` seconds after the Unix epoch; years past 9999 do not fit the format.
    pub fn from_unix_seconds(secs: u64) -> Result<Self, SigV4Error> {
        let days = i64::try_from(secs / 86_400).map_err(|_| SigV4Error::InvalidDate)?;
        let rest = secs % 86_400;
        let (year, month, day) = civil_from_days(days);
        if year > 9999 {
            return Err(SigV4Error::InvalidDate);
        }
        let (hour, minute, second) = (rest / 3600, rest / 60 % 60, rest % 60);
        Ok(Self(format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}Z")))
    }

    /// Parses `YYYYMMDDTHHMMSSZ`, checking each field's range (not the days of each month).
    pub fn parse(text: &str) -> Result<Self, SigV4Error> {
        let b = text.as_bytes();
        let shape_ok = b.len() == 16
            && b.get(8) == Some(&b'T')
            && b.get(15) == Some(&b'Z')
            && b.iter().enumerate().all(|(i, c)| matches!(i, 8 | 15) || c.is_ascii_digit());
        if !shape_ok {
            return Err(SigV4Error::InvalidDate);
        }
        let field = |from: usize, to: usize| text.get(from..to).and_then(|s| s.parse::<u32>().ok()).unwrap_or(99);
        let ranges_ok = (1..=12).contains(&field(4, 6))
            && (1..=31).contains(&field(6, 8))
            && field(9, 11) < 24
            && field(11, 13) < 60
            && field(13, 15) < 61;
        if !ranges_ok {
            return Err(SigV4Error::InvalidDate);
        }
        Ok(Self(text.to_owned()))
    }

    /// The full timestamp, the `x-amz-date` header's value.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `YYYYMMDD`, the date of the credential scope.
    pub fn day(&self) -> &str {
        self.0.get(..8).unwrap_or_default()
    }
}

/// Year, month, day of the proleptic Gregorian calendar for `days` since 1970-01-01
/// (H. Hinnant's `civil_from_days`, exact for every `i64` day count we accept).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, u32::try_from(month).unwrap_or(0), u32::try_from(day).unwrap_or(0))
}
