"""Image modality: CLEVR-like pictures ray-cast in batched torch from scene records alone:
analytic ray-primitive hits, Blinn-Phong shading, soft shadows and an
environment reflection for metal, computed only on the 8 x 8 pixel tiles objects can affect."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from curi.atomic import atomic_path
from curi.renderers.base import (
    Packed,
    Rendered,
    Renderer,
    pack_records,
    register_renderer,
    to_uint8,
)
from curi.renderers.png import png_file, png_scanlines
from curi.scenes import COLOR_RGB, COLORS, RADII, SHAPES, Camera

__all__ = ["ImageRenderer", "render_images"]

_BIG = 1.0e3  # "infinite" half-extent or radius: a constraint that never binds
_CUBE, _CYL = SHAPES.index("cube"), SHAPES.index("cylinder")
_TILE = 8  # tile side in pixels: work is done only on tiles an object or its shadow touches
Vec = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # x, y, z components, same shape


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _smoothstep(x: torch.Tensor) -> torch.Tensor:
    x = x.clamp(0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


class _Objects:
    """Geometry and material of the objects of a batch, as tensors (B, 5).

    Every shape is one convex primitive in its local frame (centre at the origin, rotated by
    ``rotation`` about z): the slabs ``|x| <= hx, |y| <= hy, |z| <= hz`` intersected with the
    quadric ``x^2 + y^2 + wz z^2 <= rr``. Cube: slabs r/sqrt(2), no quadric; sphere: no slabs,
    quadric with wz = 1; cylinder: slab hz = r, quadric with wz = 0.
    """

    def __init__(self, p: Packed, device: torch.device):
        def t(a, dtype=torch.float32):
            return torch.as_tensor(a, dtype=dtype, device=device)

        self.valid = t(p.valid, torch.bool)
        self.shape = t(p.shape, torch.long)
        r = t(np.asarray(RADII)[p.size])
        is_cube, is_cyl = self.shape == _CUBE, self.shape == _CYL
        cube_h = r / math.sqrt(2.0)
        big = torch.full_like(r, _BIG)
        self.hxy = torch.where(is_cube, cube_h, big)
        self.hz = torch.where(is_cube, cube_h, torch.where(is_cyl, r, big))
        self.wz = torch.where(is_cyl, 0.0, 1.0)
        self.rr = torch.where(is_cube, big * big, r * r)
        self.radius = r
        self.height = torch.where(is_cube, cube_h, r)  # half-height = centre z
        self.centre = t(p.position)  # (B, 5, 3)
        rad = torch.deg2rad(t(p.rotation))
        self.cos, self.sin = torch.cos(rad), torch.sin(rad)
        rgb = torch.tensor([COLOR_RGB[c] for c in COLORS], device=device) / 255.0
        self.albedo = rgb[t(p.color, torch.long)]  # (B, 5, 3)
        self.metal = t(p.material, torch.long) == 1

    def flat(self, name: str, f: torch.Tensor) -> torch.Tensor:
        """Attribute `name` (B, 5) of the objects f, indices flat over (B, 5) (b * 5 + k)."""
        return getattr(self, name).reshape(-1).index_select(0, f)


def _to_local(v: Vec, c: torch.Tensor, s: torch.Tensor) -> Vec:
    """Rotate components by minus the object's rotation (cosine c, sine s)."""
    x, y, z = v
    return torch.addcmul(c * x, s, y), torch.addcmul(c * y, s, x, value=-1.0), z


def _hit(o: Vec, d: Vec, hxy, hz, wz, rr, *, soft: bool = False) -> tuple[torch.Tensor, ...]:
    """Rays o + t d against convex primitives, in their local frames (components broadcast).

    Returns:
        t_in: the entry parameter; hit: the ray meets the primitive at t > 0; and with `soft`
        (for penumbrae) also gap: t_in - t_out, how far (in t) the ray misses the primitive
        (<= 0 on a hit); dq: distance of the ray from the quadric's surface in its metric
        (< 0: crosses it); tq: the ray parameter of closest approach to the quadric's axis
        or centre.
    """
    s_in = s_out = None
    for oc, dc, h in zip(o, d, (hxy, hxy, hz), strict=True):
        if dc.numel() < oc.numel():  # one direction per primitive (shadow rays)
            # Keep 1/dc finite: 0 * inf at the slab's centre plane would give NaN.
            inv = torch.where(dc.abs() < 1e-12, 1e-12, dc).reciprocal()  # (N, 1)
            w = h * inv.abs()  # half the slab's length along the ray
            lo = oc * -inv  # the slab's centre along the ray, then its two ends
            hi = lo + w
            lo -= w
        else:
            inv = dc.reciprocal()
            lo, hi = (-h - oc) * inv, (h - oc) * inv
            lo, hi = torch.minimum(lo, hi), torch.maximum(lo, hi)
        s_in = lo if s_in is None else torch.maximum(s_in, lo, out=s_in)
        s_out = hi if s_out is None else torch.minimum(s_out, hi, out=s_out)
    (ox, oy, oz), (dx, dy, dz) = o, d
    # Fused multiply-adds: these run on every (pair, pixel), so each pass over memory counts.
    a = torch.addcmul(torch.addcmul(dx * dx, dy, dy), wz * dz, dz).clamp_min_(1e-12)
    b = torch.addcmul(torch.addcmul(ox * dx, oy, dy), wz * oz, dz)
    c2 = torch.addcmul(torch.addcmul(ox * ox, oy, oy), wz * oz, oz)
    disc = torch.addcmul(b * b, a, c2 - rr, value=-1.0)
    sq = disc.clamp_min(0.0).sqrt_()
    ia = a.reciprocal()
    t_in = torch.maximum(s_in, (b + sq).mul_(-ia), out=s_in)
    t_out = torch.minimum(s_out, (sq - b).mul_(ia), out=s_out)
    hit = (disc >= 0).logical_and_(t_in <= t_out).logical_and_(t_out > 1e-4)
    if not soft:
        return t_in, hit
    tq = -b * ia
    dq = torch.addcmul(c2, b, tq).clamp_min_(0.0).sqrt_() - rr.sqrt()
    return t_in, hit, t_in - t_out, dq, tq


@register_renderer("image")
class ImageRenderer(Renderer):
    """CLEVR-like images (B, 3, H, W), float32 in [0, 1].

    The camera is `curi.scenes.Camera(width, height)` (the scene sampler's field of view), so
    objects are drawn where their location bins say. Rendering is pure tensor arithmetic on
    `device` (CPU or CUDA) with no randomness: the same record gives the same image alone or
    in any batch.

    Args:
        width, height: image size in pixels.
        device: torch device to render on.
        soft_shadows: penumbrae that widen with distance from the occluder (else hard).
        antialias: smooth object silhouettes (blend edge pixels with their 3 x 3 mean).
        chunk: scenes rendered at once (memory / cache trade-off); None: 32 on the CPU
            (cache-sized), 1,024 on a GPU (large batches keep it busy: image training on an
            H100 ran at 54-63 episodes/s with 1,024 against 29-38 with 32).

    Raises:
        ValueError: an image smaller than 8 x 8.
    """

    name = "image"
    gpu_capable = True
    file_suffix = ".png"
    storage_format = "support / query: uint8 (N, 3, H, W), the renderer's float images x 255"

    def __init__(
        self,
        *,
        width: int = 240,
        height: int = 160,
        device: str | torch.device = "cpu",
        soft_shadows: bool = True,
        antialias: bool = True,
        chunk: int | None = None,
    ):
        if width < 8 or height < 8:
            raise ValueError(f"image size must be at least 8 x 8, got {width} x {height}")
        self.width, self.height = int(width), int(height)
        self.device = torch.device(device)
        if chunk is None:
            chunk = 32 if self.device.type == "cpu" else 1024
        self.chunk = max(1, int(chunk))
        self.soft_shadows, self.antialias = soft_shadows, antialias
        self.camera = Camera(width=self.width, height=self.height)
        self._setup()

    @property
    def item_shape(self) -> tuple[int, ...]:
        return (3, self.height, self.width)

    @property
    def value_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    # --- fixed per camera ----------------------------------------------------------------
    def _setup(self) -> None:
        dev, cam, ts = self.device, self.camera, _TILE
        right, up, fwd = (torch.tensor(v, dtype=torch.float32, device=dev) for v in cam.basis())
        self._right, self._up, self._fwd, self._focal = right, up, fwd, cam.focal
        self._eye = torch.tensor(cam.position, dtype=torch.float32, device=dev)
        # Key light from the camera's upper left, so shadows fall right and away from the
        # viewer as in CLEVR; a weak fill light from the right casts no shadow.
        back = _unit(torch.stack([-fwd[0], -fwd[1], torch.zeros((), device=dev)]))
        z = torch.tensor([0.0, 0.0, 1.0], device=dev)
        self._light = _unit(-0.45 * right + 0.6 * back + 0.7 * z)
        self._fill = _unit(0.8 * right + 0.6 * back + 0.4 * z)
        self._panel = _unit(-0.3 * right + back + 0.5 * z)  # soft box behind the camera
        self._penumbra = 0.1 if self.soft_shadows else 0.0  # the light's angular size (rad)
        self._ntx, self._nty = -(-self.width // ts), -(-self.height // ts)
        ty, tx = torch.meshgrid(
            torch.arange(self._nty, device=dev), torch.arange(self._ntx, device=dev), indexing="ij"
        )
        self._tile_x0 = (tx.reshape(-1) * ts).float()  # (nT,)
        self._tile_y0 = (ty.reshape(-1) * ts).float()
        self._tiles_x0 = self._tile_x0[: self._ntx]  # (ntx,) left edge of each column of tiles
        self._tiles_y0 = self._tile_y0[:: self._ntx]  # (nty,) top edge of each row
        # A tile's rows of 8 pixels in the image seen as rows of 8 (`_render_chunk`): (3, 8)
        # channel, then line, relative to the first.
        lines = torch.arange(ts, device=dev) * self._ntx
        self._tile_rows = (
            torch.arange(3, device=dev)[:, None] * self._nty * ts * self._ntx + lines
        ).view(-1)
        iy, ix = torch.meshgrid(
            torch.arange(ts, device=dev), torch.arange(ts, device=dev), indexing="ij"
        )
        px = self._tile_x0[:, None] + ix.reshape(1, -1) + 0.5  # (nT, P) pixel centres
        py = self._tile_y0[:, None] + iy.reshape(1, -1) + 0.5
        d = (
            fwd * self._focal
            + right * (px - self.width / 2).unsqueeze(-1)
            - up * (py - self.height / 2).unsqueeze(-1)
        )
        self._dirs = _unit(d)  # (nT, P, 3)
        self._dirs_c = self._dirs.permute(2, 0, 1).contiguous()  # (3, nT, P) for gathers
        tg = -self._eye[2] / self._dirs[..., 2].clamp_max(-1e-6)  # every ray looks down
        ground = self._eye + tg.unsqueeze(-1) * self._dirs  # (nT, P, 3)
        self._bg = self._floor(ground)[..., 0]  # (nT, P) grey level of the lit floor
        # Shadow-ray origins on the floor, nudged up, component-major: (3, nT, P).
        self._ground_c = ground.permute(2, 0, 1).contiguous()
        self._ground_c[2] = 2e-3
        # The lit floor in image layout (3, nty * ts, ntx * ts), copied under every image
        # (contiguous: a plain copy, where the tiles' layout cost a strided one per image).
        bg = self._bg.view(self._nty, self._ntx, ts, ts).permute(0, 2, 1, 3)
        self._bg_img = bg.reshape(1, self._nty * ts, self._ntx * ts).expand(3, -1, -1).contiguous()

    def _floor(self, g: torch.Tensor) -> torch.Tensor:
        """Colour of the unshadowed floor at ground points g (..., 3): grey, lit most brightly
        around the scene centre and fading with distance like CLEVR's backdrop."""
        r2 = g[..., 0] ** 2 + g[..., 1] ** 2
        v = 0.36 + 0.2 * torch.exp(-r2 / 60.0)
        return v.unsqueeze(-1).expand(*v.shape, 3)

    def _sky(self, r: torch.Tensor) -> torch.Tensor:
        """Environment above the horizon seen in metal (directions r (..., 3)): a dim studio,
        brighter toward the horizon, with a soft box behind the camera and a glow around the
        key light, so flat metal faces pick up bright reflections that change with angle."""
        rz = r[..., 2].clamp(0.0, 1.0)
        glow = torch.exp(((r @ self._light) - 1.0) / 0.04)
        box = _smoothstep(((r @ self._panel) - 0.86) / 0.08)
        v = 0.5 + 0.35 * torch.exp(-rz / 0.2) + 0.9 * glow + 0.6 * box
        return v.unsqueeze(-1).expand(*v.shape, 3)

    def _project(self, pts: torch.Tensor) -> torch.Tensor:
        rel = pts - self._eye
        depth = (rel @ self._fwd).clamp_min(1e-3)
        px = self.width / 2 + self._focal * (rel @ self._right) / depth
        py = self.height / 2 - self._focal * (rel @ self._up) / depth
        return torch.stack([px, py], dim=-1)

    # --- per batch -----------------------------------------------------------------------
    def _coverage(self, ob: _Objects) -> tuple[torch.Tensor, torch.Tensor]:
        """Tiles each object can touch: (B, 5, nT) for its own pixels and for its shadow.

        A point shadowed by an object lies between the object and the object's shadow on the
        floor, so on screen inside the convex hull of the two bounding rectangles; a tile
        meets that hull when some rectangle interpolated between them (lam in [0, 1]) does.
        """
        dev = self.device
        sx = torch.tensor([-1.0, 1.0, -1.0, 1.0], device=dev)
        sy = torch.tensor([-1.0, -1.0, 1.0, 1.0], device=dev)
        r = ob.radius.unsqueeze(-1)  # (B, 5, 1)
        cx, cy = ob.centre[..., 0:1] + sx * r, ob.centre[..., 1:2] + sy * r  # (B, 5, 4)
        top = 2.0 * ob.height.unsqueeze(-1).expand_as(cx)
        bottom = torch.stack([cx, cy, torch.zeros_like(cx)], -1)
        upper = torch.stack([cx, cy, top], -1)
        cast = upper - (upper[..., 2:3] / self._light[2]) * self._light  # (B, 5, 4, 3)
        body = self._project(torch.cat([bottom, upper], -2))  # (B, 5, 8, 2)
        ground = self._project(torch.cat([bottom, cast], -2))
        margin = 1.5
        b_lo, b_hi = body.amin(-2) - margin, body.amax(-2) + margin  # (B, 5, 2)
        # Penumbra reach on the floor: penumbra * travel from the object's top, in pixels.
        depth = ((ob.centre - self._eye) @ self._fwd).clamp_min(1.0)
        pen = self._penumbra * 2.0 * ob.height / self._light[2] * self._focal / depth
        pen = pen.unsqueeze(-1) + margin  # (B, 5, 1)
        g_lo, g_hi = ground.amin(-2) - pen, ground.amax(-2) + pen
        # Tiles form a grid, so test each axis on its own, then combine per tile.
        own, lam_lo, lam_hi, off = [], [], [], []
        for k, t0 in enumerate((self._tiles_x0, self._tiles_y0)):  # (n,): ntx, then nty
            blo, bhi, glo, ghi = (v[..., k, None] for v in (b_lo, b_hi, g_lo, g_hi))  # (B, 5, 1)
            own.append((t0 < bhi) & (t0 + _TILE > blo))  # (B, 5, n)
            # lam where lerp(b, g, lam) meets the tile: a + slope * lam > 0 per side.
            lo, hi = torch.zeros((), device=dev), torch.ones((), device=dev)
            bad = torch.zeros((), dtype=torch.bool, device=dev)
            for a, slope in (
                (bhi - t0, ghi - bhi),  # tile low < rect high
                (t0 + _TILE - blo, blo - glo),  # tile high > rect low
            ):  # (B, 5, n), (B, 5, 1)
                root = -a / torch.where(slope == 0, 1e-9, slope)
                lo = torch.maximum(lo, torch.where(slope > 0, root, -math.inf))
                hi = torch.minimum(hi, torch.where(slope < 0, root, math.inf))
                bad = (a <= 0).logical_and_(slope == 0).logical_or_(bad)  # never met
            lam_lo.append(lo)
            lam_hi.append(hi)
            off.append(bad)
        B, nT = ob.valid.shape[0], self._ntx * self._nty

        def grid(x: torch.Tensor, y: torch.Tensor, op) -> torch.Tensor:
            return op(x.unsqueeze(-2), y.unsqueeze(-1)).view(B, 5, nT)  # (B, 5, nty, ntx)

        valid = ob.valid.unsqueeze(-1)
        cov_own = grid(*own, torch.logical_and) & valid
        hull = grid(*lam_lo, torch.maximum) <= grid(*lam_hi, torch.minimum)
        return cov_own, hull.logical_and_(valid).logical_and_(~grid(*off, torch.logical_or))

    def _render_chunk(self, p: Packed, out: torch.Tensor) -> None:
        """Render one chunk into `out` (B, 3, nty * 8, ntx * 8), contiguous: the lit floor is
        copied in, then only the active tiles are written, in place."""
        ob = _Objects(p, self.device)
        B, ts, nty, ntx = len(p), _TILE, self._nty, self._ntx
        out.copy_(self._bg_img)
        cov_own, cov_shadow = self._coverage(ob)
        ab, at = cov_shadow.any(1).nonzero(as_tuple=True)  # (T,) image, tile of active tiles
        if not ab.numel():
            return
        col, pid = self._render_tiles(ob, ab, at, cov_own, cov_shadow)  # (T, 3, P), (T, P)
        # The image as rows of 8 pixels (B * 3 * nty * 8 * ntx, 8): a tile is 3 x 8 of them,
        # copied whole (an index per pixel cost 3x the time).
        first = (ab * 3 * nty + at // ntx) * ts * ntx + at % ntx  # (T,) its first row
        rows = (first[:, None] + self._tile_rows).view(-1)  # (T * 3 * 8,)
        out.view(-1, ts).index_copy_(0, rows, col.view(-1, ts))
        if self.antialias:
            ids = torch.full((B, nty * ts, ntx * ts), -1, dtype=torch.int8, device=self.device)
            rows = rows.view(-1, 3, ts)[:, 0] - (ab * 2 * nty * ts * ntx)[:, None]  # channel 0
            ids.view(-1, ts).index_copy_(0, rows.view(-1), pid.to(torch.int8).view(-1, ts))
            self._antialias(out, ids)

    def _render_tiles(self, ob, ab, at, cov_own, cov_shadow):
        """Colours (T, 3, P) and object ids (T, P) (-1: floor) of the active tiles."""
        T, P, dev = ab.numel(), _TILE * _TILE, self.device

        # Primary rays, only for (tile, object) pairs where the object's box meets the tile.
        # Gathers go through index_select on flat views (an index per dimension cost 2-5x).
        row, obj = cov_own[ab, :, at].nonzero(as_tuple=True)  # (Q,)
        qf = ab.index_select(0, row) * 5 + obj  # (Q,) object, flat over (B, 5)
        c, s = ob.flat("cos", qf)[:, None], ob.flat("sin", qf)[:, None]  # (Q, 1)
        rel = self._eye - ob.centre.reshape(-1, 3).index_select(0, qf)  # (Q, 3)
        o = _to_local((rel[:, 0:1], rel[:, 1:2], rel[:, 2:3]), c, s)
        d = _to_local(tuple(self._dirs_c.index_select(1, at.index_select(0, row))), c, s)
        shp = (ob.flat(k, qf)[:, None] for k in ("hxy", "hz", "wz", "rr"))
        t_in, hit = _hit(o, d, *shp)  # (Q, P) each
        t_q = torch.where(hit, t_in, math.inf)  # (Q, P)
        tmin = torch.full((T, P), math.inf, device=dev)
        tmin = tmin.scatter_reduce(0, row[:, None].expand(-1, P), t_q, "amin")
        wq, wp = (hit & (t_q == tmin.index_select(0, row))).nonzero(as_tuple=True)  # (K,)
        wr, wf = row.index_select(0, wq), qf.index_select(0, wq)  # object pixels' tile, object
        px = wr * P + wp  # (K,) flat over (T, P)
        pid = torch.full((T, P), -1, dtype=torch.int8, device=dev)
        pid.view(-1).index_copy_(0, px, (wf % 5).to(torch.int8))
        d_k = self._dirs.view(-1, 3).index_select(0, at.index_select(0, wr) * P + wp)  # (K, 3)
        x_k = self._eye + tmin.view(-1).index_select(0, px)[:, None] * d_k
        n_k = self._normals(ob, wf, x_k)

        # Shadow-ray origins: the floor point, or the object point nudged off its surface.
        origin = self._ground_c.index_select(1, at)  # (3, T, P)
        origin.view(3, -1).index_copy_(1, px, (x_k + 2e-3 * n_k).T)
        vis = self._shadows(ob, ab, at, cov_shadow, origin, pid)  # (T, P)
        floor = self._bg.index_select(0, at) * (1.0 - 0.62 * (1.0 - vis))  # shadowed floor
        col = floor.unsqueeze(1).repeat(1, 3, 1)  # (T, 3, P)
        shade = self._shade(ob, wf, d_k, x_k, n_k, vis.view(-1).index_select(0, px))  # (K, 3)
        at_c = ((wr * 3 * P + wp)[:, None] + torch.arange(0, 3 * P, P, device=dev)).view(-1)
        col.view(-1).index_copy_(0, at_c, shade.view(-1))
        return col, pid

    def _normals(self, ob: _Objects, f, x) -> torch.Tensor:
        """World normals (K, 3) at surface points x (K, 3) of objects f (flat over (B, 5))."""
        c, s = ob.flat("cos", f), ob.flat("sin", f)
        rel = x - ob.centre.reshape(-1, 3).index_select(0, f)
        lx, ly, lz = _to_local(rel.unbind(-1), c, s)
        shape, r = ob.flat("shape", f), ob.flat("radius", f)
        # Cube: the axis where the point is furthest out; cylinder: cap or side; sphere: radial.
        ax, ay, az = lx.abs(), ly.abs(), lz.abs()
        cx = (ax >= ay) & (ax >= az)
        cy = ~cx & (ay >= az)
        cube = torch.stack([cx * lx.sign(), cy * ly.sign(), (~cx & ~cy) * lz.sign()], -1)
        cap = az >= r - 1e-3 * r  # on a cylinder's top (or bottom) cap
        cyl = torch.stack([lx * ~cap, ly * ~cap, cap * lz.sign()], -1)
        n = torch.stack([lx, ly, lz], -1)
        n = torch.where(
            (shape == _CUBE)[:, None], cube, torch.where((shape == _CYL)[:, None], cyl, n)
        )
        wx = c * n[:, 0] - s * n[:, 1]
        wy = s * n[:, 0] + c * n[:, 1]
        return _unit(torch.stack([wx, wy, n[:, 2]], -1))

    def _shadows(self, ob, ab, at, cov_shadow, origin, pid) -> torch.Tensor:
        """Visibility of the key light (T, P) in [0, 1] from the points `origin` (3, T, P)."""
        T, P = origin.shape[1:]
        row, obj = cov_shadow[ab, :, at].nonzero(as_tuple=True)  # (S,)
        sf = ab.index_select(0, row) * 5 + obj  # (S,) object, flat over (B, 5)
        c, s = ob.flat("cos", sf)[:, None], ob.flat("sin", sf)[:, None]  # (S, 1)
        cen = ob.centre.reshape(-1, 3).index_select(0, sf)
        o = _to_local(tuple(origin.index_select(1, row) - cen.T[:, :, None]), c, s)  # (S, P)
        L = self._light
        d = _to_local((L[0].expand_as(c), L[1].expand_as(c), L[2].expand_as(c)), c, s)
        shp = (ob.flat(k, sf)[:, None] for k in ("hxy", "hz", "wz", "rr"))
        _, hit, gap, dq, tq = _hit(o, d, *shp, soft=True)
        if self.soft_shadows:
            # Penumbra: how far the ray passes from the object (exact for spheres and the
            # cylinder's side, ~half the slab gap near box edges) relative to how far it
            # travelled there: a light of about `_penumbra` radians.
            miss = torch.maximum(dq, 0.5 * gap).clamp_min(0.0)
            v = _smoothstep(miss / (self._penumbra * tq.clamp_min(1e-3)))
            v = torch.where(tq > 0, v, 1.0)
        else:
            v = torch.ones_like(tq)
        own = pid.index_select(0, row) == obj.to(torch.int8)[:, None]  # own surface: Lambert
        v = torch.where(own, 1.0, torch.where(hit, 0.0, v))
        vis = torch.ones(T, P, device=self.device)
        return vis.scatter_reduce(0, row[:, None].expand(-1, P), v, "amin")

    def _shade(self, ob, f, dirs, x, n, vis) -> torch.Tensor:
        """Colours (K, 3) of object points: rubber is Lambertian with a faint broad sheen;
        metal is a tinted mirror of the studio and the floor (not of the other objects: at
        this size their mirror images read as dark streaks) with a broad tinted and a sharp
        white highlight, drawn as vertical stripes on cylinder sides. f (K,): the objects,
        flat over (B, 5)."""
        albedo, metal = ob.albedo.reshape(-1, 3).index_select(0, f), ob.flat("metal", f)
        L, F = self._light, self._fill
        ndl = (n @ L).clamp_min(0.0) * vis  # (K,)
        ndf = (n @ F).clamp_min(0.0)
        ndh = (n * _unit(L - dirs)).sum(-1).clamp_min(0.0)
        diffuse = 0.36 + 0.62 * ndl + 0.22 * ndf
        out = albedo * diffuse[:, None] + (0.08 * ndh.pow(10) * vis)[:, None]  # rubber
        m = metal.nonzero(as_tuple=True)[0]
        if m.numel():
            dm, xm, nm = dirs.index_select(0, m), x.index_select(0, m), n.index_select(0, m)
            ndv = -(nm * dm).sum(-1)
            refl = dm + 2.0 * ndv[:, None] * nm
            down = refl[:, 2] < -1e-3
            tg = (-xm[:, 2] / torch.where(down, refl[:, 2], -1.0)).clamp_min(0.0)
            # The mirrored floor fades into a bright haze with distance, so vertical metal
            # faces darken toward their base, as a mirror beside a dark floor does.
            haze = (1.0 - torch.exp(-tg / 1.2))[:, None]
            floor = 0.45 * self._floor(xm + tg[:, None] * refl) * (1.0 - haze) + 1.05 * haze
            env = torch.where(down[:, None], floor, self._sky(refl))
            fres = 0.8 + 0.2 * (1.0 - ndv.clamp(0.0, 1.0)).pow(5)
            hm, vm = ndh.index_select(0, m), vis.index_select(0, m)
            # A vertical side mirrors only the floor (its mirror rays point down as the view
            # rays do), so the lights appear as CLEVR's area lights do on a metal cylinder: a
            # sharp vertical stripe where the side faces the light's azimuth (half vectors
            # taken in the horizontal plane), and a weaker one for the fill light.
            shape = ob.flat("shape", f.index_select(0, m))
            upright = nm[:, 2].abs() < 0.5
            side = (shape == _CYL) & upright
            hl = self._stripe(nm, dm, L) * vm
            hf = self._stripe(nm, dm, F)
            hs = torch.where(side, hl.pow(40) + 0.35 * hf.pow(40), 0.0)
            sheen = torch.where(side, 0.5 * hl.pow(6), 0.45 * hm.pow(16) * vm)
            # A flat mirror face catches the same light as a tinted glint over the whole face.
            sheen = sheen + torch.where((shape == _CUBE) & upright, 0.4 * hl.pow(8), 0.0)
            am = albedo.index_select(0, m)
            out.index_copy_(
                0,
                m,
                am * (0.05 + 0.2 * ndl.index_select(0, m) + sheen)[:, None]
                + 1.1 * am * env * fres[:, None]
                + (1.2 * (hm.pow(150) * vm + hs))[:, None],
            )
        return out.clamp(0.0, 1.0)

    @staticmethod
    def _stripe(n: torch.Tensor, d: torch.Tensor, light: torch.Tensor) -> torch.Tensor:
        """cos of the angle between normals n (M, 3) and the horizontal part of the half
        vector of view rays d (M, 3) and a light, clamped at 0: an azimuth-only highlight."""
        h = light - d
        h = h[:, :2] / h[:, :2].norm(dim=-1, keepdim=True).clamp_min(1e-6)  # (M, 2)
        return (n[:, :2] * h).sum(-1).clamp_min(0.0)

    def _antialias(self, img: torch.Tensor, ids: torch.Tensor) -> None:
        """Blend pixels on an object silhouette (id differs from a 4-neighbour) halfway with
        their 3 x 3 mean, in place, within the image's `height` x `width`. img (B, 3, hp, wp)
        (contiguous, whole tiles), ids (B, hp, wp)."""
        H, W, hp, wp = self.height, self.width, *img.shape[2:]
        ids = ids[:, :H, :W]
        diff_y = ids[:, 1:] != ids[:, :-1]  # (B, H-1, W)
        diff_x = ids[:, :, 1:] != ids[:, :, :-1]
        edge = torch.zeros_like(ids, dtype=torch.bool)
        edge[:, 1:] |= diff_y
        edge[:, :-1] |= diff_y
        edge[:, :, 1:] |= diff_x
        edge[:, :, :-1] |= diff_x
        eb, ey, ex = edge.nonzero(as_tuple=True)  # (E,)
        off = torch.tensor([-1, 0, 1], device=img.device)
        ny = (ey[:, None] + off.repeat_interleave(3)).clamp(0, H - 1)  # (E, 9)
        nx = (ex[:, None] + off.repeat(3)).clamp(0, W - 1)
        # Flat offsets of channel 0, plus a channel's stride: index_select, not an index per
        # dimension (3x faster).
        chan = torch.arange(3, device=img.device) * (hp * wp)
        at = (eb * (3 * hp * wp))[:, None] + ny * wp + nx  # (E, 9)
        flat = img.view(-1)
        blur = flat.index_select(0, (at[:, :, None] + chan).view(-1)).view(-1, 9, 3).mean(1)
        own = ((eb * (3 * hp * wp) + ey * wp + ex)[:, None] + chan).view(-1)  # (E * 3,)
        new = 0.5 * (flat.index_select(0, own).view(-1, 3) + blur)  # (E, 3)
        flat.index_copy_(0, own, new.view(-1))

    def render(self, records: Sequence[dict]) -> Rendered:
        """Render scene records to float32 images (B, 3, H, W) in [0, 1] on `device`."""
        return self.render_packed(pack_records(records))

    @torch.inference_mode()
    def render_packed(self, packed: Packed) -> Rendered:
        """Render packed scenes to float32 images (B, 3, H, W) in [0, 1] on `device`, `chunk`
        scenes at a time."""
        hp, wp = self._nty * _TILE, self._ntx * _TILE  # whole tiles
        out = torch.empty(len(packed), 3, hp, wp, device=self.device)
        for lo in range(0, len(packed), self.chunk):
            self._render_chunk(packed[lo : lo + self.chunk], out[lo : lo + self.chunk])
        if (hp, wp) != (self.height, self.width):
            out = out[:, :, : self.height, : self.width].contiguous()
        return Rendered(out)

    @torch.inference_mode()
    def _render_hwc(self, packed: Packed) -> torch.Tensor:
        """`render_packed` quantised by `to_uint8`, channels last: uint8 (B, H, W, 3) on
        `device`. Each chunk is quantised as soon as it is drawn (while it is in the cache),
        and transposed on the way, in float: a uint8 transpose to (H, W, 3) for the PNGs
        cost 3x more, the way back to (3, H, W) for the arrays is cheap."""
        H, W, n = self.height, self.width, min(self.chunk, len(packed))
        out = torch.empty(len(packed), H, W, 3, dtype=torch.uint8, device=self.device)
        canvas = torch.empty(n, 3, self._nty * _TILE, self._ntx * _TILE, device=self.device)
        scratch = torch.empty(n, H, W, 3, device=self.device)
        for lo in range(0, len(packed), self.chunk):
            part = packed[lo : lo + self.chunk]
            img = canvas[: len(part)]
            self._render_chunk(part, img)
            hwc = img[:, :, :H, :W].permute(0, 2, 3, 1)
            to_uint8(hwc, scratch=scratch[: len(part)], out=out[lo : lo + len(part)])
        return out

    def render_uint8(self, records: Sequence[dict]) -> tuple[np.ndarray, torch.Tensor]:
        """Render and return ``(uint8 array (B, H, W, 3), float tensor (B, 3, H, W))``."""
        img = self.render(records).data
        return to_uint8(img).permute(0, 2, 3, 1).cpu().numpy(), img

    def export(
        self,
        records: Sequence[dict],
        folder: Path | None = None,
        names: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Images as uint8 (B, 3, H, W) (the float images x 255, rounded: the same bytes as
        `render_uint8`), and with `folder` one PNG per record (see `Renderer.export`,
        `png_bytes`), each renamed into place but not flushed to disk one by one (an fsync
        per file cost 7 ms of wall time per image on a shared machine): callers publish the
        whole folder (`curi.atomic.atomic_dir`)."""
        hwc = self._render_hwc(pack_records(records)).cpu().numpy()  # (B, H, W, 3)
        if folder is not None:
            for r, name in zip(png_scanlines(hwc), names, strict=True):
                with atomic_path(folder / f"{name}{self.file_suffix}", fsync=False) as tmp:
                    tmp.write_bytes(png_file(r, 3))
        return {"data": np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))}  # (B, 3, H, W)

    def file_bytes(self, records: Sequence[dict]) -> list[bytes]:
        """One PNG file's bytes per record (exports with rendered files)."""
        hwc = self._render_hwc(pack_records(records)).cpu().numpy()  # (B, H, W, 3)
        return [png_file(r, 3) for r in png_scanlines(hwc)]


def render_images(
    records: Sequence[dict], *, width: int = 240, height: int = 160, device: str = "cpu"
) -> tuple[np.ndarray, torch.Tensor]:
    """Render scene records: ``(uint8 (B, H, W, 3), float32 (B, 3, H, W) in [0, 1])``."""
    return ImageRenderer(width=width, height=height, device=device).render_uint8(records)
