"""Sound renderer: every row of the documented mapping (renderers/sound.py) is audible in the
waveform (onset from x, pitch from y, timbre from colour, envelope from shape, gain from size, low-
pass for metal); deterministic; spectrogram range; WAV export. The torch path (sound_torch.py)
agrees with the numpy one within the stated tolerance, on the CPU here and on CUDA where present."""

import dataclasses
import itertools
import wave

import numpy as np
import pytest
import torch

from curi.renderers import get_renderer
from curi.renderers.base import pack_records
from curi.renderers.sound import (
    SCALE_MIDI,
    SoundConfig,
    SoundRenderer,
    _lowpass,
    note_bank,
    save_wav,
    spectrogram,
    synthesize,
)
from curi.renderers.sound_torch import TorchSound
from curi.scenes import COLORS

INTS = ("shape", "color", "material", "size", "x", "y")
TOL = 1e-4  # torch vs numpy spectrograms, max abs (values in [0, 1]); see SoundRenderer

CFG = SoundConfig()
SR = CFG.sample_rate


def obj(shape="cube", color="green", material="rubber", size="large", x=1, y=4):
    return {
        "shape": shape,
        "color": color,
        "material": material,
        "size": size,
        "x": x,
        "y": y,
        "position": [0.0, 0.0, 0.5],
        "rotation": 0.0,
    }


def one(**kw) -> np.ndarray:
    return synthesize([{"objects": [obj(**kw)]}])[0]


def note(w: np.ndarray, x: int) -> np.ndarray:
    """The samples of the note that starts at x bin `x`."""
    on = CFG.onset_samples()[x - 1]
    return w[on : on + CFG.note_samples]


def rms(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(a.astype(np.float64) ** 2)))


def spectrum(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mag = np.abs(np.fft.rfft(a * np.hanning(len(a))))
    return np.fft.rfftfreq(len(a), 1 / SR), mag


def test_first_energy_rise_follows_x_bin():
    waves = synthesize([{"objects": [obj(x=x)]} for x in range(1, 9)])
    frame = 160  # 10 ms
    starts = []
    for w in waves:
        e = np.sqrt((w[: len(w) // frame * frame].reshape(-1, frame) ** 2).mean(1))
        starts.append(int(np.argmax(e > 0.1 * e.max())) * frame)
    assert starts == sorted(starts) and len(set(starts)) == 8
    np.testing.assert_allclose(starts, CFG.onset_samples(), atol=0.05 * SR)


def test_dominant_pitch_follows_y_bin():
    peaks = []
    for y in range(1, 9):
        f, mag = spectrum(note(one(color="green", y=y), 1))  # flute: the fundamental dominates
        peaks.append(f[mag.argmax()])
    want = [440 * 2 ** ((m - 69) / 12) for m in SCALE_MIDI]
    np.testing.assert_allclose(peaks, want, rtol=0.02)
    assert peaks == sorted(peaks, reverse=True)  # higher in the image, higher in pitch


def centroid(a: np.ndarray) -> float:
    f, mag = spectrum(a)
    return float((f * mag).sum() / mag.sum())


@pytest.mark.parametrize("color", ["gray", "blue", "purple"])
def test_metal_is_low_passed(color):
    rubber = centroid(note(one(color=color, material="rubber", y=8), 1))
    metal = centroid(note(one(color=color, material="metal", y=8), 1))
    assert metal < 0.75 * rubber
    f, mag = spectrum(note(one(color=color, material="metal", y=8), 1))
    f2, mag2 = spectrum(note(one(color=color, material="rubber", y=8), 1))
    hi = f > 2500  # well above the 1 kHz cutoff: strongly attenuated
    assert mag[hi].sum() < 0.05 * mag2[hi].sum()


def test_large_is_louder_than_small():
    ratio = rms(one(size="large")) / rms(one(size="small"))
    np.testing.assert_allclose(ratio, 1.0 / 0.3, rtol=0.02)


@pytest.mark.parametrize("color", ["gray", "red", "green", "cyan"])
def test_envelopes_by_shape(color):
    def halves(shape):
        n = note(one(shape=shape, color=color), 1)
        return rms(n[: len(n) // 2]), rms(n[len(n) // 2 :])

    first, second = halves("cylinder")
    assert second > 2 * first  # fading in
    first, second = halves("sphere")
    assert first > 2 * second  # fading out
    first, second = halves("cube")
    assert 0.8 < second / first < 1.25  # constant


def test_colours_have_distinct_timbres():
    profiles = {}
    for c in COLORS:
        f, mag = spectrum(note(one(color=c, y=8), 1))
        f0 = 440 * 2 ** ((SCALE_MIDI[7] - 69) / 12)
        harm = np.array([mag[np.abs(f - k * f0) < f0 / 4].max() for k in range(1, 9)])
        profiles[c] = harm / np.linalg.norm(harm)
    for a, b in itertools.combinations(COLORS, 2):
        # Spectral envelope differs (cosine distance of the first 8 harmonics) or, for two
        # similar spectra, the temporal shape does (attack, pluck decay, vibrato).
        spec_dist = 1 - profiles[a] @ profiles[b]
        wa, wb = (note(one(color=c, y=8), 1) for c in (a, b))
        env = [np.abs(w[: len(w) // 160 * 160]).reshape(-1, 160).max(1) for w in (wa, wb)]
        env_dist = np.abs(env[0] / env[0].max() - env[1] / env[1].max()).mean()
        assert spec_dist > 0.04 or env_dist > 0.1, (a, b, spec_dist, env_dist)


def test_guitar_plucks_and_violin_has_vibrato():
    g = note(one(color="yellow"), 1)
    assert rms(g[: SR // 20]) > 2 * rms(g[SR // 2 : SR // 2 + SR // 20])  # decays

    def pitch_track(color: str) -> np.ndarray:
        """Fundamental frequency in 50 ms windows (zero-padded FFT peak near f0)."""
        n = note(one(color=color, y=4), 1)
        f0 = 440 * 2 ** ((SCALE_MIDI[3] - 69) / 12)
        freqs = np.fft.rfftfreq(1 << 15, 1 / SR)
        near = np.abs(freqs - f0) < f0 / 4
        track = []
        for lo in range(SR // 10, len(n) - 800, 400):
            mag = np.abs(np.fft.rfft(n[lo : lo + 800] * np.hanning(800), 1 << 15))
            track.append(freqs[near][mag[near].argmax()])
        return np.asarray(track)

    assert pitch_track("blue").std() > 1.0  # violin vibrato: about +-3 Hz at 392 Hz
    assert pitch_track("red").std() < 0.3  # clarinet: steady


def test_mix_deterministic_and_batch_independent():
    recs = [
        {"objects": [obj(x=2, y=3, color="red"), obj(x=5, y=7, color="blue", material="metal")]},
        {"objects": [obj(x=8, y=1, shape="sphere", size="small")]},
    ]
    a = synthesize(recs)
    assert a.dtype == np.float32 and a.shape == (2, CFG.num_samples)
    assert np.array_equal(a, synthesize(recs))
    assert np.array_equal(a[1], synthesize(recs[1:])[0])
    assert np.abs(a).max() <= 1.0


def test_spectrogram_and_renderer_options():
    r = SoundRenderer(sample_rate=8000, duration=1.0, note_duration=0.4, n_fft=256, hop_length=128)
    out = r.render([{"objects": [obj()]}]).data
    assert out.shape == (1, 129, 1 + 8000 // 128) == (1, *r.item_shape)
    assert 0 <= out.min() and out.max() <= 1
    s = spectrogram(
        synthesize([{"objects": [obj(size="large")]}, {"objects": [obj(size="small")]}])
    )
    assert s.shape == (2, 201, 161)
    assert s[0].mean() > s[1].mean()  # fixed reference: louder scenes give larger values
    with pytest.raises(ValueError, match="note_duration"):
        SoundRenderer(note_duration=3.0)


def test_wav_roundtrip(tmp_path):
    w = one()
    p = save_wav(w, tmp_path / "a.wav", SR)
    with wave.open(str(p)) as f:
        assert f.getframerate() == SR and f.getnframes() == len(w) and f.getsampwidth() == 2
        pcm = np.frombuffer(f.readframes(len(w)), "<i2")
    np.testing.assert_allclose(pcm / 32767, w, atol=1e-4)


# --- the torch path -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bank_records(tiny_bank):
    ids = np.random.default_rng(17).choice(tiny_bank.num_scenes, 300, replace=False)
    return tiny_bank.scene_records(ids)


@pytest.fixture(scope="module")
def cpu_specs(bank_records):
    return SoundRenderer().render(bank_records).data


def test_torch_path_matches_the_numpy_path(bank_records, cpu_specs):
    """300 random bank scenes: measured max 1.7e-5 here (2.0e-5 over 2,300 sampled scenes),
    so TOL leaves room for other FFT libraries while a changed window, reference or dB floor
    fails (test below; a changed hop changes the shape)."""
    r = SoundRenderer(backend="torch")
    assert r.backend == "torch" and SoundRenderer().backend == "numpy"
    out = r.render(bank_records).data
    assert out.shape == cpu_specs.shape and out.dtype == torch.float32
    diff = (out - cpu_specs).abs()
    assert diff.max() <= TOL and diff.mean() <= 1e-6
    assert 0 <= out.min() and out.max() <= 1
    waves = np.abs(r.waveforms(bank_records[:50]) - synthesize(bank_records[:50]))
    assert waves.max() <= 1e-6


def _torch_sound(**changes) -> TorchSound:
    cfg = SoundConfig(**changes)
    return TorchSound(cfg, note_bank(cfg), _lowpass(cfg.sample_rate, cfg.cutoff_hz))


@pytest.mark.parametrize("change", ["window", "top_db", "reference", "no_lowpass"])
def test_tolerance_catches_a_changed_stft_or_scale(bank_records, cpu_specs, change):
    """The tolerance is tight: each of these small departures from the CPU path exceeds it."""
    ts = _torch_sound(top_db=79.0) if change == "top_db" else _torch_sound()
    if change == "window":
        ts._window = torch.hamming_window(CFG.n_fft, periodic=True)
    elif change == "reference":
        ts._offset += 0.05 / CFG.top_db  # reference 0.05 dB (0.6%) off
    elif change == "no_lowpass":
        ts._ramps[8:] = ts._ramps[:8]
    out = ts.render(pack_records(bank_records[:100]))
    assert (out - cpu_specs[:100]).abs().max() > 4 * TOL


def test_torch_path_edge_scenes_match():
    """Five notes at one onset (overlap and clipping), all metal or all rubber, the last onset,
    and a configuration with another rate, clip length and FFT size."""
    same = [obj(x=3, y=y, material="metal", shape="cube") for y in (1, 2, 4, 6, 8)]
    last = [obj(x=8, y=y, color=c) for y, c in zip((1, 3, 5, 7, 8), COLORS, strict=False)]
    recs = [{"objects": same}, {"objects": last}, {"objects": [obj(size="small")]}]
    w = synthesize(recs)
    assert np.abs(w[0]).max() == 1.0  # clipped
    np.testing.assert_allclose(SoundRenderer(backend="torch").waveforms(recs), w, atol=1e-6)
    opts = dict(sample_rate=8000, duration=1.0, note_duration=0.4, n_fft=256, hop_length=128)
    a = SoundRenderer(**opts).render(recs).data
    b = SoundRenderer(backend="torch", **opts).render(recs).data
    assert a.shape == b.shape and (a - b).abs().max() <= TOL


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_render_packed_equals_render(bank_records, backend):
    r = SoundRenderer(backend=backend)
    recs = bank_records[:70]  # more than one chunk of either path
    out = r.render(recs).data
    assert torch.equal(r.render_packed(pack_records(recs)).data, out)
    assert torch.equal(r.render(recs).data, out)  # deterministic
    torch.testing.assert_close(r.render(recs[40:41]).data[0], out[40], atol=1e-5, rtol=0)
    assert r.render_packed(pack_records([])).data.shape == (0, *r.item_shape)
    narrow = pack_records(recs[:8])  # a packer may store the small indices as int8
    narrow = dataclasses.replace(narrow, **{f: getattr(narrow, f).astype(np.int8) for f in INTS})
    assert torch.equal(r.render_packed(narrow).data, out[:8])
    w = torch.ones((), requires_grad=True)
    (out * w).sum().backward()  # usable as training input (no inference-mode tensor)


def test_torch_path_checks_records_and_exports(bank_records, tmp_path):
    r = get_renderer("sound", backend="torch")
    with pytest.raises(ValueError, match="location bins"):
        r.render([{"objects": [obj(x=0)]}])
    arrays = r.export(bank_records[:3], tmp_path, ["a", "b", "c"])
    assert arrays["data"].dtype == np.float16
    np.testing.assert_allclose(arrays["data"], r.render(bank_records[:3]).data, atol=1e-3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.wav", "b.wav", "c.wav"]


def test_backend_and_device_errors():
    with pytest.raises(ValueError, match="backend must be one of"):
        SoundRenderer(backend="jax")
    with pytest.raises(ValueError, match="bad option"):
        get_renderer("sound", backends="torch")
    with pytest.raises(ValueError, match="unknown device"):
        SoundRenderer(device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            SoundRenderer(device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_the_cpu_paths(bank_records):
    """CUDA against the torch path on the CPU, and against the numpy path where librosa is
    installed (a GPU machine may lack it)."""
    r = SoundRenderer(device="cuda")
    assert r.backend == "torch"
    out = r.render(bank_records).data
    assert out.device.type == "cuda"
    assert torch.equal(r.render(bank_records).data, out)
    assert torch.equal(r.render_packed(pack_records(bank_records)).data, out)
    out = out.cpu()
    assert (out - SoundRenderer(backend="torch").render(bank_records).data).abs().max() <= TOL
    try:
        import librosa  # noqa: F401
    except ImportError:
        pass
    else:
        assert (out - SoundRenderer().render(bank_records).data).abs().max() <= TOL
    with pytest.raises(ValueError, match="backend=numpy"):
        SoundRenderer(device="cuda", backend="numpy")
