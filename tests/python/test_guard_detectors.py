"""The built-in guardrail detectors, checked differentially against independent implementations.

`ferrogate guardrails detect <detector> --lines` runs the filter's own scanner over each stdin
line; here thousands of seeded random candidates (valid ones built with correct check digits,
and mutations of them) go through it in one process each, and every verdict must equal the
oracle's:

  * card: python-stdnum's `luhn` (and an issuer-prefix table written here from the card
    networks' published ranges, the part stdnum does not have);
  * iban: python-stdnum's `iban` with `check_country=False` (mod-97 and the country's BBAN
    format from its copy of the SWIFT registry), and for BBANs that break the country's
    format, stdnum's `iso7064.mod_97_10` plus the registry length (see DIFFERENCES);
  * ssn: python-stdnum's `us.ssn`;
  * ip: Python's `ipaddress` (IPv4Address, IPv6Address).

A candidate is "found" when the detector reports exactly one match spanning its whole line.
Presidio's pattern recognizers (`CreditCardRecognizer`, `IbanRecognizer`, `EmailRecognizer`)
run without any spaCy model, so a corpus of sentences is also compared with them, on the
inputs where both define the same thing (see DIFFERENCES).

DIFFERENCES (ours vs the oracles, deliberate, handled explicitly below):

  * ssn: stdnum also refuses three specific numbers that were famously misused or printed in
    advertising (078-05-1120, 457-55-5462, 219-09-9999); we apply the SSA's structural rules
    only, so those are still SSNs to us (a value a user typed is sensitive whatever its
    history). Only the dashed form `AAA-GG-SSSS` is an SSN to us; stdnum also takes nine bare
    digits.
  * iban: we check length and mod-97, not each country's BBAN character classes (nor the
    national check digits that `check_country=True` adds); upper-case letters only.
  * card (Presidio): Presidio's pattern admits any number starting 1, 3, 4, 5[0-5] or 6 in
    13–17 digits and separators that may change between groups; we require a network's range
    (so Mastercard 2221–2720 and Maestro 56–59 are cards to us, 1xxx and most 3xxx are not),
    13–19 digits, and one kind of separator. The corpus uses numbers valid under both.
  * iban (Presidio): Presidio also takes dashes, and separators anywhere between groups of
    four; we take the compact form or single spaces every four characters. Its per-country
    formats may miss the registry's newest countries. The corpus uses compact and space-grouped
    IBANs of long-registered countries.
  * email (Presidio): Presidio takes any atext and Unicode word characters in the local part
    and checks the top-level domain against the Public Suffix List; we take letters, digits
    and `._%+-` and any alphabetic top-level label of two letters or more. The corpus uses
    addresses valid under both.
  * ip: a bare `::` is not an address to us (punctuation far more often); `ipaddress` accepts it.

Environment: FERROGATE_BIN (default target/debug/ferrogate).
"""

from __future__ import annotations

import ipaddress
import json
import random
import re
import string
import subprocess
from pathlib import Path

import pytest
from presidio_analyzer.predefined_recognizers import CreditCardRecognizer, EmailRecognizer, IbanRecognizer
from stdnum import iban as std_iban
from stdnum import luhn
from stdnum.iso7064 import mod_97_10
from stdnum.us import ssn as std_ssn

from conftest import _bin

SEED = 20240115
N = 4000  # candidates per family


def detect(detector: str, lines: list[str]) -> list[list[dict]]:
    """The detector's matches for each line (one process for all of them)."""
    assert all("\n" not in line and "\r" not in line for line in lines)
    proc = subprocess.run([str(_bin()), "guardrails", "detect", detector, "--lines"], input="".join(f"{l}\n" for l in lines),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(l) for l in proc.stdout.splitlines()]
    assert len(out) == len(lines)
    return out


def whole(detector: str, lines: list[str]) -> list[bool]:
    """For each line: is it one match, the whole line?"""
    return [len(m) == 1 and m[0]["start"] == 0 and m[0]["end"] == len(l.encode()) and m[0]["text"] == l
            for l, m in zip(lines, detect(detector, lines))]


def assert_agrees(detector: str, candidates: list[str], oracle) -> None:
    """Our verdict equals the oracle's on every candidate (and there are both kinds)."""
    ours = whole(detector, candidates)
    theirs = [bool(oracle(c)) for c in candidates]
    wrong = [(c, o, t) for c, o, t in zip(candidates, ours, theirs) if o != t]
    assert not wrong, f"{len(wrong)} disagreements (candidate, ours, oracle), e.g. {wrong[:10]}"
    assert 0.05 < sum(theirs) / len(theirs) < 0.95, "the candidates should mix valid and invalid ones"


def mutate_digit(rng: random.Random, s: str) -> str:
    """`s` with one digit changed to another digit."""
    positions = [i for i, c in enumerate(s) if c.isdigit()]
    i = rng.choice(positions)
    return s[:i] + rng.choice([d for d in string.digits if d != s[i]]) + s[i + 1:]


# --------------------------------------------------------------------------- cards

# The networks' issuer ranges as (low, high) prefixes of equal length: Visa, Mastercard (both
# series), Maestro, Amex, Diners, JCB; Discover (6011, 644–649, 65) and UnionPay (62) fall
# inside Maestro's 56–69.
IIN_RANGES = [(4, 4), (51, 55), (2221, 2720), (50, 50), (56, 69), (34, 34), (37, 37), (36, 36), (38, 38),
              (300, 305), (3528, 3589)]


def iin_ok(digits: str) -> bool:
    return any(lo <= int(digits[:len(str(lo))]) <= hi for lo, hi in IIN_RANGES)


def card_oracle(candidate: str) -> bool:
    digits = re.sub(r"[ -]", "", candidate)
    return digits.isdigit() and 13 <= len(digits) <= 19 and iin_ok(digits) and luhn.is_valid(digits)


def grouped(rng: random.Random, digits: str) -> str:
    """`digits` in a grouping we accept: a group of 4, then groups of 3 to 6, one separator."""
    sizes, rest = [4], len(digits) - 4
    while rest:
        options = [n for n in range(3, 7) if n == rest or rest - n >= 3]
        if not options:
            return digits
        sizes.append(rng.choice(options))
        rest -= sizes[-1]
    sep, parts, at = rng.choice(" -"), [], 0
    for n in sizes:
        parts.append(digits[at:at + n])
        at += n
    return sep.join(parts)


def card_candidates(rng: random.Random) -> list[str]:
    out = []
    for _ in range(N):
        kind = rng.random()
        if kind < 0.85:
            lo, hi = rng.choice(IIN_RANGES)
            prefix = str(rng.randint(lo, hi)) if kind < 0.75 else str(rng.randint(1, 9))
            length = rng.randint(13, 19)
            body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
            number = body + luhn.calc_check_digit(body)
            if rng.random() < 0.4:
                number = mutate_digit(rng, number)
        else:  # lengths around the bounds, random digits
            number = "".join(rng.choice(string.digits) for _ in range(rng.choice([11, 12, 13, 19, 20, 21])))
        out.append(grouped(rng, number) if rng.random() < 0.4 else number)
    return out


def test_card_agrees_with_stdnum_luhn():
    assert_agrees("card", card_candidates(random.Random(SEED)), card_oracle)


# --------------------------------------------------------------------------- IBANs

def registry() -> dict[str, str]:
    """stdnum's copy of the SWIFT IBAN registry: country -> BBAN structure (`8!n10!c`)."""
    dat = Path(std_iban.__file__).with_name("iban.dat").read_text()
    return dict(re.findall(r'^([A-Z]{2}) .*?bban="([^"]*)"', dat, flags=re.M))


REGISTRY = registry()
LENGTHS = {cc: 4 + sum(int(n) for n, _ in re.findall(r"(\d+)!([nac])", s)) for cc, s in REGISTRY.items()}


def bban_for(rng: random.Random, structure: str, conform: bool) -> str:
    classes = {"n": string.digits, "a": string.ascii_uppercase, "c": string.digits + string.ascii_uppercase}
    alphabet = lambda k: classes[k] if conform else classes["c"]  # noqa: E731
    return "".join(rng.choice(alphabet(k)) for n, k in re.findall(r"(\d+)!([nac])", structure) for _ in range(int(n)))


def with_check_digits(cc: str, bban: str) -> str:
    return cc + std_iban.calc_check_digits(cc + "00" + bban) + bban


def iban_candidates(rng: random.Random, conform: bool) -> list[str]:
    countries = sorted(REGISTRY)
    out = []
    for _ in range(N):
        cc = rng.choice(countries)
        number = with_check_digits(cc, bban_for(rng, REGISTRY[cc], conform))
        r = rng.random()
        if r < 0.3:
            number = mutate_digit(rng, number)
        elif r < 0.35:
            number = number[:-1]
        elif r < 0.4:
            number = number + rng.choice(string.digits)
        elif r < 0.45:  # a code that is no country's (or one of its letters changed)
            number = rng.choice(["XX", "AA", "ZZ", cc[0] + "Q"]) + number[2:]
        elif r < 0.5:
            number = number[:2] + number[3] + number[2] + number[4:]
        out.append(std_iban.format(number) if rng.random() < 0.5 else number)
    return out


def test_registry_lengths_match_stdnum():
    """Our table is the SWIFT registry too: every country stdnum knows, no more, same lengths."""
    lines = [with_check_digits(cc, "0" * (n - 4)) for cc, n in sorted(LENGTHS.items())]
    assert all(whole("iban", lines))
    too_long = [with_check_digits(cc, "0" * (n - 3)) for cc, n in sorted(LENGTHS.items())]
    assert not any(whole("iban", too_long))
    unknown = [with_check_digits(a + b, "0" * 18) for a in string.ascii_uppercase for b in string.ascii_uppercase
               if a + b not in LENGTHS]
    assert not any(whole("iban", unknown))


def test_iban_agrees_with_stdnum():
    assert_agrees("iban", iban_candidates(random.Random(SEED), conform=True),
                  lambda c: std_iban.is_valid(c, check_country=False))


def test_iban_with_any_bban_agrees_with_mod97_and_the_registry_length():
    """BBANs ignoring the country's character classes: stdnum refuses them, we only check the
    length and mod-97 (see DIFFERENCES), so the oracle is stdnum's mod-97 and length table."""
    def oracle(c: str) -> bool:
        n = std_iban.compact(c)
        return LENGTHS.get(n[:2]) == len(n) and n[2:4].isdigit() and mod_97_10.is_valid(n[4:] + n[:4])
    assert_agrees("iban", iban_candidates(random.Random(SEED + 1), conform=False), oracle)


def test_lower_case_ibans_are_not_found():
    valid = [c for c in iban_candidates(random.Random(SEED + 2), conform=True)
             if std_iban.is_valid(c, check_country=False)][:200]
    assert all(whole("iban", valid)) and not any(whole("iban", [c.lower() for c in valid]))


# --------------------------------------------------------------------------- SSNs

# stdnum's blacklist (DIFFERENCES): numbers it refuses beyond the SSA's rules.
STDNUM_BLACKLIST = {"078-05-1120", "457-55-5462", "219-09-9999"}


def test_stdnum_blacklist_is_the_known_one():
    assert set(std_ssn._ssn_blacklist) == STDNUM_BLACKLIST
    assert all(whole("ssn", sorted(STDNUM_BLACKLIST)))


def ssn_candidates(rng: random.Random) -> list[str]:
    out = sorted(STDNUM_BLACKLIST)
    for _ in range(N):
        area = rng.choice(["000", "666", f"{rng.randint(900, 999)}"]) if rng.random() < 0.15 else f"{rng.randint(0, 999):03}"
        group = "00" if rng.random() < 0.1 else f"{rng.randint(0, 99):02}"
        serial = "0000" if rng.random() < 0.1 else f"{rng.randint(0, 9999):04}"
        out.append(f"{area}-{group}-{serial}")
    return out


def test_ssn_agrees_with_stdnum():
    assert_agrees("ssn", ssn_candidates(random.Random(SEED)), lambda c: std_ssn.is_valid(c) or c in STDNUM_BLACKLIST)


def test_undashed_ssns_are_not_found():
    valid = [c.replace("-", "") for c in ssn_candidates(random.Random(SEED)) if std_ssn.is_valid(c)][:200]
    assert all(std_ssn.is_valid(c) for c in valid) and not any(whole("ssn", valid))


# --------------------------------------------------------------------------- IP addresses

def ipv4_oracle(c: str) -> bool:
    try:
        ipaddress.IPv4Address(c)
        return True
    except ValueError:
        return False


def ipv6_oracle(c: str) -> bool:
    try:
        ipaddress.IPv6Address(c)
    except ValueError:
        return False
    return c != "::"


def ipv4_candidates(rng: random.Random) -> list[str]:
    out = []
    for _ in range(N):
        octets = [str(rng.choice([0, 1, 9, 10, 99, 100, 199, 200, 249, 250, 255, rng.randint(0, 255)])) for _ in range(4)]
        r = rng.random()
        if r < 0.1:
            octets[rng.randrange(4)] = str(rng.randint(256, 999))
        elif r < 0.2:
            i = rng.randrange(4)
            octets[i] = "0" + octets[i]
        elif r < 0.25:
            octets.pop()
        elif r < 0.3:
            octets.append(str(rng.randint(0, 255)))
        elif r < 0.33:
            octets[rng.randrange(4)] = ""
        out.append(".".join(octets))
    return out


def ipv6_text(rng: random.Random, value: int) -> str:
    """One of the textual forms of `value`."""
    addr = ipaddress.IPv6Address(value)
    groups = addr.exploded.split(":")
    r = rng.random()
    if r < 0.35:
        text = addr.compressed
    elif r < 0.55:
        text = ":".join(g.lstrip("0") or "0" for g in groups)
    elif r < 0.7:
        text = addr.exploded
    else:  # the last 32 bits as dotted IPv4, after six groups, compressed or not
        v4 = str(ipaddress.IPv4Address(value & 0xFFFF_FFFF))
        text = compress(groups[:6]) + v4 if rng.random() < 0.5 else ":".join(groups[:6]) + ":" + v4
    return text.upper() if rng.random() < 0.2 else text


def compress(groups: list[str]) -> str:
    """`groups` with their longest run of zero groups written `::`, ready for more after it."""
    best, run = (0, 0), 0
    for i, g in enumerate(groups):
        run = run + 1 if int(g, 16) == 0 else 0
        if run > best[1]:
            best = (i + 1 - run, run)
    if not best[1]:
        return ":".join(groups) + ":"
    left, right = groups[:best[0]], groups[best[0] + best[1]:]
    return ":".join(left) + "::" + "".join(g + ":" for g in right)


def ipv6_candidates(rng: random.Random) -> list[str]:
    out = ["::", "::1", "1::", "::ffff:1.2.3.4", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8"]
    for _ in range(N):
        # Zero runs of every length, so every compression appears.
        groups = [0 if rng.random() < 0.4 else rng.randint(0, 0xFFFF) for _ in range(8)]
        text = ipv6_text(rng, int("".join(f"{g:04x}" for g in groups), 16))
        r = rng.random()
        if r < 0.06:
            text = text.replace(":", ":::", 1)
        elif r < 0.12 and "::" not in text:
            text = text.split(":", 1)[1]
        elif r < 0.18:
            text = text + ":1"
        elif r < 0.22:
            text = text + "::1"
        elif r < 0.26:
            text = text.replace(":", ":12345:", 1)
        elif r < 0.3:
            text = text.replace("0", "g", 1)
        elif r < 0.34 and "." in text:
            text = text.replace(".", ".0", 1)
        elif r < 0.38 and "." in text:
            text = text + ".1"
        elif r < 0.42:
            text = "1:" + text
        out.append(text)
    return out


def test_ipv4_agrees_with_ipaddress():
    assert_agrees("ip", ipv4_candidates(random.Random(SEED)), ipv4_oracle)


def test_ipv6_agrees_with_ipaddress():
    assert_agrees("ip", ipv6_candidates(random.Random(SEED)), ipv6_oracle)


def test_random_runs_of_address_characters_agree_with_ipaddress():
    """Strings of hex digits, `:` and `.` up to the longest address: whatever they spell, an
    address exactly when `ipaddress` parses one (IPv6 with two colons or more, else IPv4)."""
    rng = random.Random(SEED)
    alphabet, weights = "0123456789abcdefABCDEF:.", [3] * 10 + [1] * 12 + [6, 2]
    candidates = ["".join(rng.choices(alphabet, weights, k=rng.randint(2, 45))) for _ in range(5 * N)]
    candidates += [c for c in ipv6_candidates(rng) if len(c) <= 45]
    assert_agrees("ip", candidates, lambda c: ipv6_oracle(c) if c.count(":") >= 2 else ipv4_oracle(c))


# --------------------------------------------------------------------------- Presidio


@pytest.fixture
def offline_tlds(monkeypatch):
    """Presidio's email check asks tldextract for the domain's public suffix; its bundled
    snapshot of the list answers, with no download attempted."""
    import tldextract
    monkeypatch.setattr(tldextract, "extract", tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None))


def presidio_found(recognizer, entity: str, sentences: list[str]) -> list[list[str]]:
    return [sorted(s[r.start:r.end] for r in recognizer.analyze(s, [entity], None) if r.score > 0) for s in sentences]


def ours_found(detector: str, sentences: list[str]) -> list[list[str]]:
    return [sorted(m["text"] for m in ms) for ms in detect(detector, sentences)]


TEMPLATES = ["Please use {} for this.", "{}", "Value: {}.", "It is {}, not the other one.", "({})", "send to {} today"]


def assert_same_as_presidio(detector: str, recognizer, entity: str, values: list[str], rng: random.Random) -> None:
    sentences = [rng.choice(TEMPLATES).format(v) for v in values]
    ours, theirs = ours_found(detector, sentences), presidio_found(recognizer, entity, sentences)
    wrong = [(s, o, t) for s, o, t in zip(sentences, ours, theirs) if o != t]
    assert not wrong, f"{len(wrong)} disagreements (sentence, ours, presidio), e.g. {wrong[:10]}"
    assert any(ours) and not all(ours)


def test_cards_in_sentences_agree_with_presidio():
    rng = random.Random(SEED)
    values = []
    for _ in range(600):
        # Prefixes and lengths both define as cards (see DIFFERENCES): Visa, Mastercard
        # 51–55, Discover and Amex; grouped 4-4-4-4 or 4-6-5 with one separator, or bare.
        prefix, length = rng.choice([("4", 16), ("51", 16), ("55", 16), ("6011", 16), ("65", 16), ("34", 15), ("37", 15)])
        body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
        number = body + luhn.calc_check_digit(body)
        if rng.random() < 0.4:
            number = mutate_digit(rng, number)
        sep = rng.choice(["", " ", "-"])
        sizes = [4, 4, 4, 4] if length == 16 else [4, 6, 5]
        parts, at = [], 0
        for n in sizes:
            parts.append(number[at:at + n])
            at += n
        values.append(sep.join(parts))
    assert_same_as_presidio("card", CreditCardRecognizer(), "CREDIT_CARD", values, rng)


def test_ibans_in_sentences_agree_with_presidio():
    rng = random.Random(SEED)
    # Countries in every registry release Presidio's table may have.
    countries = ["DE", "GB", "FR", "NL", "ES", "IT", "CH", "AT", "BE", "PL", "NO", "SE", "DK", "IE", "PT", "FI"]
    values = []
    for _ in range(600):
        cc = rng.choice(countries)
        number = with_check_digits(cc, bban_for(rng, REGISTRY[cc], conform=True))
        if rng.random() < 0.4:
            number = mutate_digit(rng, number)
        values.append(std_iban.format(number) if rng.random() < 0.5 else number)
    assert_same_as_presidio("iban", IbanRecognizer(), "IBAN_CODE", values, rng)


def test_emails_in_sentences_agree_with_presidio(offline_tlds):
    rng = random.Random(SEED)
    locals_ = ["john", "j.doe", "first.last", "a_b", "x+tag", "ops-team", "u123", "Mixed.Case"]
    domains = ["example.com", "mail.example.org", "example.co.uk", "sub-domain.example.io", "example.de", "ex4mple.net"]
    bad = ["john@localhost", "john@", "@example.com", "john@@example.com", "john@example", "john@.com",
           "john.@example.com"]
    values = [f"{rng.choice(locals_)}@{rng.choice(domains)}" if rng.random() < 0.7 else rng.choice(bad) for _ in range(400)]
    assert_same_as_presidio("email", EmailRecognizer(), "EMAIL_ADDRESS", values, rng)
