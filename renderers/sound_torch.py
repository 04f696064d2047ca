"""Sound in torch on any device (paper Appendix B.5): the waveforms and spectrograms of
`curi.renderers.sound`, computed in batches on the renderer's device (a GPU in training) with
no per-scene Python work.

Every note is one of 384 waveforms (colour x pitch x shape x size, `sound.note_bank`), so a
scene is a sum of known notes, each delayed to its onset and, for metal, low-passed. Both are
linear and time-invariant, so the mix is done on the notes' spectra, computed once: a delay
is a phase ramp and the low-pass its frequency response. One inverse FFT per scene gives the
waveform (clipped to [-1, 1] as on the CPU), then `torch.stft` the spectrogram.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from curi.renderers.base import Packed
from curi.scenes import MAX_OBJECTS

if TYPE_CHECKING:
    from curi.renderers.sound import SoundConfig

__all__ = ["TorchSound"]

_TAIL = 1e-12  # impulse-response samples below this fraction of its peak are dropped
_AMIN = 1e-5  # magnitude floor before the log, as the CPU path's librosa.amplitude_to_db


def _lowpass_response(sos: np.ndarray, num_samples: int) -> tuple[np.ndarray, int]:
    """The low-pass's impulse response (float64) over a clip, without the tail below `_TAIL`
    of its peak (a shorter FFT), and an FFT size that holds the clip plus that response, so
    circular convolution equals the CPU path's causal filter over the clip."""
    from scipy.fft import next_fast_len  # scipy.signal is slow to import: only when used
    from scipy.signal import sosfilt

    impulse = np.zeros(num_samples + 1)
    impulse[0] = 1.0
    h = sosfilt(sos, impulse)
    keep = int(np.nonzero(np.abs(h) > _TAIL * np.abs(h).max())[0].max()) + 1
    return h[:keep], next_fast_len(num_samples + keep, real=True)


class TorchSound:
    """Batched sound rendering on one device; the same results as `sound.synthesize` and
    `sound.spectrogram` within float32 rounding (see `SoundRenderer`).

    Args:
        config: the sound options (`SoundConfig`).
        notes: `sound.note_bank(config)`, (384, note_samples).
        sos: the metal low-pass as second-order sections (scipy's ``sos``).
        device: where tables live and rendering runs.
        chunk: scenes transformed at once (bounds memory: about 0.6 MB of temporaries per
            scene at the default 2 s, 16 kHz, measured on the CPU).
    """

    def __init__(
        self,
        config: SoundConfig,
        notes: np.ndarray,
        sos: np.ndarray,
        *,
        device: str | torch.device = "cpu",
        chunk: int = 256,
    ):
        self.config, self.device, self.chunk = config, torch.device(device), max(1, int(chunk))
        t = config.num_samples
        h, self.n_fft_mix = _lowpass_response(sos, t)
        n = self.n_fft_mix
        freqs = np.arange(n // 2 + 1)  # (F,)
        # Delays as phase ramps, from exact integer phases: (8, F).
        turns = (freqs[None, :] * config.onset_samples()[:, None]) % n / n
        delay = np.exp(-2j * np.pi * turns)
        lowpass = np.fft.rfft(h, n)
        bank = np.fft.rfft(notes.astype(np.float64), n)  # (384, F)
        bank = np.concatenate([bank, np.zeros((1, len(freqs)))])  # row 384: silence
        self._silent = len(notes)
        self._bank = torch.as_tensor(bank.astype(np.complex64), device=self.device)
        # Row material * 8 + (x - 1): delay, and the low-pass for metal (16, F).
        ramps = np.concatenate([delay, delay * lowpass[None]]).astype(np.complex64)
        self._ramps = torch.as_tensor(ramps, device=self.device)
        self._window = torch.hann_window(config.n_fft, periodic=True, device=self.device)
        # 1 + dB / top_db, with dB = 20 log10(|X| / ref): scale * ln(|X|^2) + offset.
        ref = config.n_fft / 4  # STFT magnitude of a unit sine under a Hann window
        self._scale = 10.0 / (math.log(10.0) * config.top_db)
        self._offset = 1.0 - 20.0 * math.log10(ref) / config.top_db

    def _indices(self, p: Packed) -> tuple[torch.Tensor, torch.Tensor]:
        """Note rows (B, 5) into the bank (silence for padding) and ramp rows (B, 5)."""
        color, y, shape, size, material, x = (
            np.asarray(a, np.int64) for a in (p.color, p.y, p.shape, p.size, p.material, p.x)
        )
        note = np.where(p.valid, ((color * 8 + y - 1) * 3 + shape) * 2 + size, self._silent)
        ramp = np.where(p.valid, material * 8 + x - 1, 0)
        return torch.as_tensor(note, device=self.device), torch.as_tensor(ramp, device=self.device)

    def _waveforms(self, p: Packed) -> torch.Tensor:
        """`waveforms` of one chunk."""
        note, ramp = self._indices(p)
        spec = torch.zeros(len(p), self._bank.shape[1], dtype=self._bank.dtype, device=self.device)
        for k in range(MAX_OBJECTS):  # a fixed 5 slots, each a batched multiply-add: (B, F)
            spec.addcmul_(
                self._bank.index_select(0, note[:, k]), self._ramps.index_select(0, ramp[:, k])
            )
        wave = torch.fft.irfft(spec, self.n_fft_mix)[:, : self.config.num_samples]
        return wave.clamp_(-1.0, 1.0)

    def _spectrogram(self, waves: torch.Tensor) -> torch.Tensor:
        """`spectrogram` of one chunk."""
        c = self.config
        z = torch.stft(
            waves,
            c.n_fft,
            c.hop_length,
            window=self._window,
            center=True,
            pad_mode="constant",
            return_complex=True,
        )
        power = (z.real.square() + z.imag.square()).clamp_min_(_AMIN**2)  # (B, F, frames)
        return power.log_().mul_(self._scale).add_(self._offset).clamp_(0.0, 1.0)

    def _chunked(self, fn, batch, n: int, shape: tuple[int, ...]) -> torch.Tensor:
        """fn over `chunk`-sized slices of `batch` (n items), into one (n, *shape) tensor."""
        out = torch.empty(n, *shape, device=self.device)
        for lo in range(0, n, self.chunk):
            hi = lo + self.chunk
            out[lo:hi] = fn(batch[lo:hi])  # a Packed slices as a batch of scenes
        return out

    @torch.no_grad()  # not inference_mode: training saves its inputs for backward
    def waveforms(self, p: Packed) -> torch.Tensor:
        """Waveforms (B, num_samples) float32 in [-1, 1] on the device; locations checked by
        the caller (`sound.check_locations`)."""
        return self._chunked(self._waveforms, p, len(p), (self.config.num_samples,))

    @torch.no_grad()
    def spectrogram(self, waves: torch.Tensor) -> torch.Tensor:
        """Log-magnitude spectrograms (B, n_fft // 2 + 1, frames) in [0, 1] of waveforms
        (B, num_samples) on the device: the CPU path's STFT (periodic Hann window, centred
        frames, zero padding) and dB scale, in float32."""
        return self._chunked(self._spectrogram, waves.to(self.device), len(waves), self.item_shape)

    @torch.no_grad()
    def render(self, p: Packed) -> torch.Tensor:
        """Spectrograms (B, F, frames) float32 in [0, 1] of a packed batch, on the device."""
        return self._chunked(
            lambda q: self._spectrogram(self._waveforms(q)), p, len(p), self.item_shape
        )

    @property
    def item_shape(self) -> tuple[int, int]:
        """(n_fft // 2 + 1, frames) of one spectrogram."""
        return self.config.spectrogram_shape
