"""Sound modality (paper Appendix B.5): one synthesised note per object, mixed. Colour
picks the instrument, y bin the pitch, x bin the onset, shape the envelope, size the gain,
metal a 1 kHz low-pass; the model reads a log-magnitude spectrogram, computed with numpy and
librosa on the CPU, or in torch on the renderer's device (`curi.renderers.sound_torch`)."""

from __future__ import annotations

import dataclasses
import inspect
import io
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from curi.atomic import atomic_path
from curi.renderers.base import Packed, Rendered, Renderer, pack_records, register_renderer
from curi.renderers.sound_torch import TorchSound
from curi.scenes import COLORS, SHAPES
from curi.validate import choice

__all__ = [
    "INSTRUMENTS",
    "SCALE_MIDI",
    "Instrument",
    "SoundConfig",
    "SoundRenderer",
    "check_locations",
    "note_bank",
    "synthesize",
    "spectrogram",
    "save_wav",
    "wav_bytes",
]

# y bin 1 (top of the image) is the highest note: C major, C5 down to C4.
SCALE_MIDI = (72, 71, 69, 67, 65, 64, 62, 60)
_TABLE = 2048  # samples per wavetable period
_CHUNK = 16  # scenes synthesised at once


@dataclass(frozen=True)
class Instrument:
    """A synthesised timbre: harmonic amplitudes (fundamental first), attack time, vibrato,
    and a pluck (a decay from the attack down to a sustain level)."""

    name: str
    harmonics: tuple[float, ...]
    attack: float
    vibrato_hz: float = 0.0
    vibrato_depth: float = 0.0  # relative frequency deviation
    pluck_sustain: float = 1.0  # level the pluck decays to (1: no pluck)
    pluck_tau: float = 0.1  # seconds


INSTRUMENTS: dict[str, Instrument] = {
    # Brass: many strong harmonics peaking at the 3rd, quick attack, slight vibrato.
    "gray": Instrument(
        "trumpet", (0.55, 0.85, 1, 0.95, 0.8, 0.65, 0.5, 0.38, 0.28, 0.2, 0.14), 0.04, 5.0, 0.003
    ),
    # Cylindrical bore: odd harmonics dominate.
    "red": Instrument(
        "clarinet", (1, 0.04, 0.75, 0.04, 0.5, 0.03, 0.32, 0.02, 0.18, 0.01, 0.1), 0.03
    ),
    # Bowed string: bright, a strong 2nd partial and a long tail; slow attack, clear vibrato.
    "blue": Instrument(
        "violin", (0.7, 1, 0.75, 0.45, 0.6, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2), 0.09, 5.5, 0.008
    ),
    # Nearly sinusoidal, gentle vibrato.
    "green": Instrument("flute", (1, 0.1, 0.03), 0.06, 4.5, 0.004),
    # Double reed: nasal, second and third harmonics above the fundamental.
    "brown": Instrument(
        "oboe", (0.5, 1, 0.85, 0.55, 0.35, 0.25, 0.15, 0.1, 0.06), 0.03, 5.0, 0.003
    ),
    # Conical reed: strong fundamental, a dip at the 2nd, a reedy band at 3-4 and 6-7.
    "purple": Instrument(
        "saxophone", (1, 0.3, 0.6, 0.55, 0.2, 0.4, 0.35, 0.1, 0.08), 0.04, 5.0, 0.005
    ),
    # Mellow brass: a strong 2nd harmonic, few above, soft attack.
    "cyan": Instrument("french horn", (1, 0.75, 0.35, 0.12, 0.05), 0.08),
    # Plucked string: instant attack decaying to a low sustain.
    "yellow": Instrument(
        "guitar",
        (1, 0.7, 0.5, 0.42, 0.3, 0.25, 0.18, 0.12, 0.08, 0.05),
        0.004,
        pluck_sustain=0.3,
        pluck_tau=0.12,
    ),
}


@dataclass(frozen=True)
class SoundConfig:
    """Options of the sound modality.

    Attributes:
        sample_rate: samples per second.
        duration: clip length in seconds.
        note_duration: length of every note in seconds; the 8 onsets are evenly spaced over
            ``[0, duration - note_duration]``.
        cutoff_hz: low-pass cutoff for metal (4th-order Butterworth).
        n_fft, hop_length: spectrogram frame and hop (n_fft // 2 + 1 frequency bins).
        top_db: dynamic range of the normalised spectrogram.
        master_gain: fixed mix level (no per-scene normalisation, so size stays audible).
    """

    sample_rate: int = 16_000
    duration: float = 2.0
    note_duration: float = 0.8
    cutoff_hz: float = 1000.0
    n_fft: int = 400
    hop_length: int = 200
    top_db: float = 80.0
    master_gain: float = 0.25

    def check(self) -> None:
        """Raises ValueError on inconsistent options."""
        if self.sample_rate < 4000:
            raise ValueError(f"sample_rate must be >= 4000, got {self.sample_rate}")
        if not 0 < self.note_duration <= self.duration:
            raise ValueError("need 0 < note_duration <= duration")
        if not 0 < self.cutoff_hz < self.sample_rate / 2:
            raise ValueError("cutoff_hz must be between 0 and the Nyquist frequency")
        if self.n_fft < 16 or self.hop_length < 1:
            raise ValueError("n_fft must be >= 16 and hop_length >= 1")

    @property
    def num_samples(self) -> int:
        return int(round(self.duration * self.sample_rate))

    @property
    def spectrogram_shape(self) -> tuple[int, int]:
        """(frequency bins, frames) of one spectrogram: (n_fft // 2 + 1, 1 + samples // hop)."""
        return (self.n_fft // 2 + 1, 1 + self.num_samples // self.hop_length)

    @property
    def note_samples(self) -> int:
        return int(round(self.note_duration * self.sample_rate))

    def onset_samples(self) -> np.ndarray:
        """Start sample of x bins 1..8 (index 0..7)."""
        span = self.num_samples - self.note_samples
        return np.round(np.arange(8) * span / 7).astype(np.int64)


def _midi_hz(m: float) -> float:
    return 440.0 * 2.0 ** ((m - 69) / 12)


@lru_cache(maxsize=8)
def _tables(sample_rate: int) -> np.ndarray:
    """One period per (colour, y bin): (8, 8, TABLE + 1) float32, peak 1, band-limited below
    Nyquist (the extra sample wraps around for interpolation)."""
    phase = np.arange(_TABLE + 1) / _TABLE
    out = np.zeros((len(COLORS), 8, _TABLE + 1), np.float32)
    for ci, colour in enumerate(COLORS):
        amps = np.asarray(INSTRUMENTS[colour].harmonics, float)
        for yi, m in enumerate(SCALE_MIDI):
            k = np.arange(1, len(amps) + 1)
            keep = k * _midi_hz(m) < 0.45 * sample_rate
            w = (amps[keep, None] * np.sin(2 * np.pi * k[keep, None] * phase)).sum(0)
            out[ci, yi] = w / np.abs(w).max()
    return out


@lru_cache(maxsize=8)
def _lowpass(sample_rate: int, cutoff: float) -> np.ndarray:
    from scipy.signal import butter

    return butter(4, cutoff, btype="low", fs=sample_rate, output="sos")


@lru_cache(maxsize=8)
def _note_tables(cfg: SoundConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-note curves over the note's L samples, shared by all notes of a kind:
    warped time per colour (8, L) (time plus the vibrato's phase deviation, so phase is
    frequency * warp), envelope per colour (8, L) (attack, pluck, release) and per shape
    (3, L) (cube constant, sphere fading out, cylinder fading in)."""
    t = np.arange(cfg.note_samples) / cfg.sample_rate  # (L,)
    warp, env = [], []
    for colour in COLORS:
        i = INSTRUMENTS[colour]
        r = max(i.vibrato_hz, 1e-6)
        warp.append(t + i.vibrato_depth * (1 - np.cos(2 * np.pi * r * t)) / (2 * np.pi * r))
        pluck = i.pluck_sustain + (1 - i.pluck_sustain) * np.exp(-t / i.pluck_tau)
        release = np.minimum((cfg.note_duration - t) / 0.03, 1.0)
        env.append(np.minimum(t / i.attack, 1.0) * pluck * release)
    u = t / cfg.note_duration
    trend = {"cube": np.ones_like(u), "sphere": 1.0 - 0.95 * u, "cylinder": 0.05 + 0.95 * u}
    shape_env = np.stack([trend[s] for s in SHAPES])
    return tuple(np.asarray(a, np.float32) for a in (warp, env, shape_env))


def _notes(
    colour: np.ndarray, yb: np.ndarray, shape: np.ndarray, size: np.ndarray, cfg: SoundConfig
) -> np.ndarray:
    """The notes of N objects, float32 (N, note_samples): timbre and pitch from colour and
    y bin (0-based), times the instrument's and the shape's envelopes and the size's gain."""
    warp, inst_env, shape_env = _note_tables(cfg)
    freq = np.asarray([_midi_hz(m) for m in SCALE_MIDI], np.float32)[yb]  # (N,)

    # Table lookup at the instrument's (vibrato-warped) time, linear interpolation: (N, L).
    cycles = freq[:, None] * warp[colour]
    pos = (cycles - np.floor(cycles)) * _TABLE
    i0 = pos.astype(np.int64)
    frac = pos - i0
    i0 += ((colour * 8 + yb) * (_TABLE + 1))[:, None]
    tab = _tables(cfg.sample_rate).reshape(-1)
    tone = tab[i0]
    tone += (tab[i0 + 1] - tone) * frac
    gain = np.where(size == 1, 1.0, 0.3).astype(np.float32) * cfg.master_gain
    return tone * inst_env[colour] * shape_env[shape] * gain[:, None]


@lru_cache(maxsize=4)
def note_bank(cfg: SoundConfig) -> np.ndarray:
    """Every note the sound modality can play: float32 (384, note_samples), read-only, row
    ``((colour * 8 + y_bin - 1) * 3 + shape) * 2 + size`` (indices into COLORS, SHAPES,
    SIZES). A scene's waveform is a mix of these rows, shifted to their onsets."""
    c, y, s, z = (a.reshape(-1) for a in np.indices((len(COLORS), 8, len(SHAPES), 2)))
    bank = _notes(c, y, s, z, cfg)
    bank.setflags(write=False)
    return bank


def check_locations(p: Packed) -> None:
    """Raises ValueError unless every object has location bins x, y in 1..8 (they pick its
    onset and pitch)."""
    x, y = p.x[p.valid], p.y[p.valid]
    if np.any((x < 1) | (x > 8) | (y < 1) | (y > 8)):
        raise ValueError("sound needs location bins x, y in 1..8 for every object")


def synthesize(records: Sequence[dict] | Packed, config: SoundConfig | None = None) -> np.ndarray:
    """Waveforms of a batch of scene records (paper Appendix B.5), with numpy and scipy.

    Args:
        records: scene records (`ConceptBank.scene_records`) or the same packed
            (`pack_records`).
        config: sound options (default `SoundConfig()`).

    Returns:
        float32 (B, num_samples) in [-1, 1].
    """
    cfg = config or SoundConfig()
    cfg.check()
    p = records if isinstance(records, Packed) else pack_records(records)
    if len(p) > _CHUNK:  # (N, L) temporaries stay in cache
        parts = [synthesize(p[i : i + _CHUNK], cfg) for i in range(0, len(p), _CHUNK)]
        return np.concatenate(parts)
    check_locations(p)
    n_out, n_note = cfg.num_samples, cfg.note_samples
    b, k = np.nonzero(p.valid)  # one note per object: (N,)
    colour, y, shape, size, x, metal = (
        np.asarray(a[b, k], np.int64) for a in (p.color, p.y, p.shape, p.size, p.x, p.material)
    )
    notes = _notes(colour, y - 1, shape, size, cfg)

    # Mix: rubber and metal buses per scene; the metal bus is low-passed.
    bus = np.zeros((2, len(p), n_out), np.float32)
    onsets = cfg.onset_samples()[x - 1]
    for j in range(len(b)):
        bus[metal[j], b[j], onsets[j] : onsets[j] + n_note] += notes[j]
    if metal.any():
        from scipy.signal import sosfilt

        bus[1] = sosfilt(_lowpass(cfg.sample_rate, cfg.cutoff_hz), bus[1], axis=-1)
    return np.clip(bus[0] + bus[1], -1.0, 1.0)


def spectrogram(waves: np.ndarray, config: SoundConfig | None = None) -> np.ndarray:
    """Log-magnitude spectrograms (B, n_fft // 2 + 1, frames) in [0, 1] (librosa STFT).

    0 is ``top_db`` below, 1 at the level of a full-scale sine; the reference is fixed, so
    louder scenes give larger values.
    """
    import librosa  # slow first import: only when sound is used

    cfg = config or SoundConfig()
    mag = np.abs(
        librosa.stft(waves, n_fft=cfg.n_fft, hop_length=cfg.hop_length, pad_mode="constant")
    )
    ref = cfg.n_fft / 4  # STFT magnitude of a unit sine under a Hann window
    db = librosa.amplitude_to_db(mag, ref=ref, amin=1e-5, top_db=None)
    return np.clip(1.0 + db / cfg.top_db, 0.0, 1.0).astype(np.float32)


def wav_bytes(waveform: np.ndarray, sample_rate: int) -> bytes:
    """One waveform (T,) in [-1, 1] as the bytes of a 16-bit mono WAV file."""
    pcm = (np.clip(waveform, -1, 1) * 32767).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def save_wav(waveform: np.ndarray, path: str | Path, sample_rate: int) -> Path:
    """Write one waveform (T,) in [-1, 1] as 16-bit mono WAV."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(wav_bytes(waveform, sample_rate))
    return path


@lru_cache(maxsize=4)
def _torch_sound(cfg: SoundConfig, device: torch.device, chunk: int) -> TorchSound:
    """The torch path's tables for one config on one device (built once: about 50 MB)."""
    return TorchSound(
        cfg, note_bank(cfg), _lowpass(cfg.sample_rate, cfg.cutoff_hz), device=device, chunk=chunk
    )


def _checked_device(device: str | torch.device) -> torch.device:
    """`device` as a torch device, or ValueError naming what to use instead."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}; use cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device} asked for, but CUDA is not available on this machine; use device=cpu"
        )
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device={device}: only {torch.cuda.device_count()} GPU(s) here")
    return dev


BACKENDS = ("auto", "numpy", "torch")
_TORCH_CHUNK = {"cpu": 32, "cuda": 1024}  # scenes per transform; see benchmarks/bench_sound.py


@register_renderer("sound")
class SoundRenderer(Renderer):
    """Spectrograms (B, n_fft // 2 + 1, frames), float32 in [0, 1]; see `SoundConfig` for the
    options (passed as keywords). Encoders read them with a channel axis, (B, 1, F, T).

    Two paths compute the same spectrograms: numpy (`synthesize`, then librosa's STFT in
    `spectrogram`) on the CPU, and torch (`curi.renderers.sound_torch`), batched on the
    renderer's device. ``backend="auto"`` takes numpy on the CPU and torch on any other
    device (``device="cuda"``); ``"torch"`` forces it on the CPU too (faster there as well,
    see docs/benchmarks.md). The two agree within float32 rounding: on 2,300 sampled scenes
    the torch path (float32, CPU) differed from the numpy path by at most 2.0e-5 in the
    spectrogram (values in [0, 1]; mean 3.5e-8), largest in quiet bins just above the -80 dB
    floor, and by at most 1.8e-7 in the waveform. Tests hold both paths to 1e-4, on CUDA too
    where present; a 0.05 dB change of the reference, top_db 79 or another window exceed it.

    Args:
        device: where spectrograms are returned (and, with the torch path, computed).
        backend: ``auto``, ``numpy`` or ``torch`` (see above).
        **options: `SoundConfig` fields.

    Raises:
        ValueError: a bad option, an unknown device or backend, numpy asked for off the CPU,
            or CUDA asked for where there is none.
    """

    name = "sound"
    gpu_capable = True
    file_suffix = ".wav"
    storage_format = "support / query: float16 (N, F, T) spectrograms in [0, 1]"

    def __init__(self, *, device: str | torch.device = "cpu", backend: str = "auto", **options):
        self.config = SoundConfig(**options)
        self.config.check()
        self.device = _checked_device(device)
        choice(backend, "backend", BACKENDS)
        if backend == "numpy" and self.device.type != "cpu":
            raise ValueError(f"backend=numpy renders on the CPU; use backend=torch on {device}")
        on_cpu = self.device.type == "cpu"
        self.backend = "numpy" if backend == "numpy" or (backend == "auto" and on_cpu) else "torch"

    @property
    def _torch(self) -> TorchSound:
        chunk = _TORCH_CHUNK.get(self.device.type, 256)
        return _torch_sound(self.config, self.device, chunk)

    @property
    def item_shape(self) -> tuple[int, ...]:
        return self.config.spectrogram_shape

    @property
    def value_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (1, *self.item_shape)  # one channel: (1, F, T)

    def waveforms(self, records: Sequence[dict] | Packed) -> np.ndarray:
        """Waveforms (B, num_samples) float32 in [-1, 1], by the renderer's backend."""
        p = records if isinstance(records, Packed) else pack_records(records)
        if self.backend == "numpy":
            return synthesize(p, self.config)
        check_locations(p)
        return self._torch.waveforms(p).cpu().numpy()

    def render(self, records: Sequence[dict]) -> Rendered:
        return self.render_packed(pack_records(records))

    def render_packed(self, packed: Packed) -> Rendered:
        """`render` of scenes already packed (`pack_records`): what a training pipeline
        passes from its workers instead of per-scene dicts."""
        if len(packed) == 0:
            return Rendered(torch.zeros(0, *self.item_shape, device=self.device))
        if self.backend == "numpy":
            spec = spectrogram(synthesize(packed, self.config), self.config)
            return Rendered(torch.from_numpy(spec).to(self.device))
        check_locations(packed)
        return Rendered(self._torch.render(packed))

    def _spectrogram(self, waves: np.ndarray) -> np.ndarray:
        """The backend's spectrograms of waveforms (B, num_samples), as numpy."""
        if self.backend == "numpy":
            return spectrogram(waves, self.config)
        return self._torch.spectrogram(torch.from_numpy(waves)).cpu().numpy()

    def export(
        self,
        records: Sequence[dict],
        folder: Path | None = None,
        names: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Spectrograms as float16 (B, F, T), and with `folder` one 16-bit WAV per record of
        the waveform they come from (see `Renderer.export`)."""
        waves = self.waveforms(records)
        if folder is not None:
            for w, name in zip(waves, names, strict=True):
                save_wav(w, folder / f"{name}{self.file_suffix}", self.config.sample_rate)
        return {"data": self._spectrogram(waves).astype(np.float16)}

    def file_bytes(self, records: Sequence[dict]) -> list[bytes]:
        """One WAV file's bytes per record (exports with rendered files)."""
        return [wav_bytes(w, self.config.sample_rate) for w in self.waveforms(records)]


# The renderer's options are `SoundConfig`'s fields (plus `device` and `backend`): its
# signature says so, with their types, so the registry's option check
# (`curi.registry.Registry.build`) names an unknown option or a value of the wrong type.
SoundRenderer.__signature__ = inspect.Signature(
    [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        for name, default, hint in [
            ("device", "cpu", "str | torch.device"),
            ("backend", "auto", "str"),
            *((f.name, f.default, f.type) for f in dataclasses.fields(SoundConfig)),
        ]
    ]
)
