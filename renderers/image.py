"""Image modality: CLEVR-like pictures ray-cast in batched torch from scene records alone:
analytic ray-primitive hits, Blinn-Phong shading, soft shadows and an
environment reflection for metal, computed only on the 8 x 8 pixel tiles objects can affect."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from curi.atomic import atomic_path
from curi.renderers.base import Packed, Rendered, Renderer, pack_records, register_renderer
from curi.scenes import COLOR_RGB, COLORS, RADII, SHAPES, Camera

__all__ = ["PNG_LEVEL", "ImageRenderer", "png_bytes", "render_images", "save_png"]

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
            H100 ran at 54-63 episodes/s with 1,024 against 29-38 with 32, issue 17).

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
        # The lit floor in image layout (1, 1, nty, ts, ntx, ts), copied under every image.
        self._bg_img = self._bg.view(self._nty, self._ntx, ts, ts).permute(0, 2, 1, 3)[None, None]

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
        tlo = torch.stack([self._tile_x0, self._tile_y0], -1)  # (nT, 2)
        thi = tlo + _TILE
        valid = ob.valid.unsqueeze(-1)
        own = ((tlo < b_hi.unsqueeze(-2)) & (thi > b_lo.unsqueeze(-2))).all(-1) & valid
        # lam where lerp(b, g, lam) meets the tile: a + slope * lam > 0 per axis and side.
        lam_lo = torch.zeros((), device=dev)
        lam_hi = torch.ones((), device=dev)
        for a, slope in (
            (b_hi.unsqueeze(-2) - tlo, (g_hi - b_hi).unsqueeze(-2)),  # tile low < rect high
            (thi - b_lo.unsqueeze(-2), (b_lo - g_lo).unsqueeze(-2)),  # tile high > rect low
        ):  # (B, 5, nT, 2)
            root = -a / torch.where(slope == 0, torch.full_like(slope, 1e-9), slope)
            lam_lo = torch.maximum(lam_lo, torch.where(slope > 0, root, -math.inf).amax(-1))
            lam_hi = torch.minimum(lam_hi, torch.where(slope < 0, root, math.inf).amin(-1))
            lam_hi = torch.where(((slope == 0) & (a <= 0)).any(-1), -1.0, lam_hi)
        return own, (lam_lo <= lam_hi) & valid

    def _render_chunk(self, p: Packed, out: torch.Tensor) -> None:
        """Render one chunk into `out` (B, 3, nty * 8, ntx * 8), contiguous: the lit floor is
        copied in, then only the active tiles are written, in place."""
        ob = _Objects(p, self.device)
        B, ts, nty, ntx = len(p), _TILE, self._nty, self._ntx
        img6 = out.view(B, 3, nty, ts, ntx, ts)  # tiles of the image, no copy
        img6.copy_(self._bg_img)
        cov_own, cov_shadow = self._coverage(ob)
        ab, at = cov_shadow.any(1).nonzero(as_tuple=True)  # (T,) image, tile of active tiles
        if not ab.numel():
            return
        col, pid = self._render_tiles(ob, ab, at, cov_own, cov_shadow)  # (T, 3, P), (T, P)
        ty, tx = at // ntx, at % ntx
        img6[ab, :, ty, :, tx, :] = col.view(-1, 3, ts, ts)
        if self.antialias:
            ids = torch.full((B, nty, ts, ntx, ts), -1, dtype=torch.int8, device=self.device)
            ids[ab, ty, :, tx, :] = pid.view(-1, ts, ts).to(torch.int8)
            ids = ids.view(B, nty * ts, ntx * ts)[:, : self.height, : self.width]
            self._antialias(out[:, :, : self.height, : self.width], ids)

    def _render_tiles(self, ob, ab, at, cov_own, cov_shadow):
        """Colours (T, 3, P) and object ids (T, P) (-1: floor) of the active tiles."""
        T, P, dev = ab.numel(), _TILE * _TILE, self.device

        # Primary rays, only for (tile, object) pairs where the object's box meets the tile.
        row, obj = cov_own[ab, :, at].nonzero(as_tuple=True)  # (Q,)
        qb = ab[row]
        c, s = ob.cos[qb, obj, None], ob.sin[qb, obj, None]  # (Q, 1)
        rel = self._eye - ob.centre[qb, obj]  # (Q, 3)
        o = _to_local((rel[:, 0:1], rel[:, 1:2], rel[:, 2:3]), c, s)
        d = _to_local(tuple(self._dirs_c[:, at[row]]), c, s)  # (Q, P) each
        shp = (ob.hxy[qb, obj, None], ob.hz[qb, obj, None], ob.wz[qb, obj, None])
        t_in, hit = _hit(o, d, *shp, ob.rr[qb, obj, None])
        t_q = torch.where(hit, t_in, math.inf)  # (Q, P)
        tmin = torch.full((T, P), math.inf, device=dev)
        tmin = tmin.scatter_reduce(0, row[:, None].expand(-1, P), t_q, "amin")
        wq, wp = (hit & (t_q == tmin[row])).nonzero(as_tuple=True)  # (K,) object pixels
        wr, wo, wb = row[wq], obj[wq], qb[wq]
        pid = torch.full((T, P), -1, dtype=torch.long, device=dev)
        pid[wr, wp] = wo
        d_k = self._dirs[at[wr], wp]  # (K, 3)
        x_k = self._eye + tmin[wr, wp, None] * d_k
        n_k = self._normals(ob, wb, wo, x_k)

        # Shadow-ray origins: the floor point, or the object point nudged off its surface.
        origin = self._ground_c[:, at]  # (3, T, P)
        origin[:, wr, wp] = (x_k + 2e-3 * n_k).T
        vis = self._shadows(ob, ab, at, cov_shadow, origin, pid)  # (T, P)
        floor = self._bg[at] * (1.0 - 0.62 * (1.0 - vis))  # shadowed floor (T, P)
        col = floor.unsqueeze(1).repeat(1, 3, 1)  # (T, 3, P)
        col[wr, :, wp] = self._shade(ob, wb, wo, d_k, x_k, n_k, vis[wr, wp])
        return col, pid

    def _normals(self, ob: _Objects, b, k, x) -> torch.Tensor:
        """World normals (K, 3) at surface points x (K, 3) of objects (b, k)."""
        c, s = ob.cos[b, k], ob.sin[b, k]
        rel = x - ob.centre[b, k]
        lx, ly, lz = _to_local(rel.unbind(-1), c, s)
        shape, r = ob.shape[b, k], ob.radius[b, k]
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
        sb = ab[row]
        c, s = ob.cos[sb, obj, None], ob.sin[sb, obj, None]  # (S, 1)
        cen = ob.centre[sb, obj]
        o = _to_local(tuple(origin[:, row] - cen.T[:, :, None]), c, s)  # (S, P) each
        L = self._light
        d = _to_local((L[0].expand_as(c), L[1].expand_as(c), L[2].expand_as(c)), c, s)
        shp = (ob.hxy[sb, obj, None], ob.hz[sb, obj, None], ob.wz[sb, obj, None])
        _, hit, gap, dq, tq = _hit(o, d, *shp, ob.rr[sb, obj, None], soft=True)
        if self.soft_shadows:
            # Penumbra: how far the ray passes from the object (exact for spheres and the
            # cylinder's side, ~half the slab gap near box edges) relative to how far it
            # travelled there: a light of about `_penumbra` radians.
            miss = torch.maximum(dq, 0.5 * gap).clamp_min(0.0)
            v = _smoothstep(miss / (self._penumbra * tq.clamp_min(1e-3)))
            v = torch.where(tq > 0, v, 1.0)
        else:
            v = torch.ones_like(tq)
        own = pid[row] == obj[:, None]  # own surface: Lambert shading handles it
        v = torch.where(own, 1.0, torch.where(hit, 0.0, v))
        vis = torch.ones(T, P, device=self.device)
        return vis.scatter_reduce(0, row[:, None].expand(-1, P), v, "amin")

    def _shade(self, ob, b, k, dirs, x, n, vis) -> torch.Tensor:
        """Colours (K, 3) of object points: rubber is Lambertian with a faint broad sheen;
        metal is a tinted mirror of the studio and the floor (not of the other objects: at
        this size their mirror images read as dark streaks) with a broad tinted and a sharp
        white highlight, drawn as vertical stripes on cylinder sides."""
        albedo, metal = ob.albedo[b, k], ob.metal[b, k]
        L, F = self._light, self._fill
        ndl = (n @ L).clamp_min(0.0) * vis  # (K,)
        ndf = (n @ F).clamp_min(0.0)
        ndh = (n * _unit(L - dirs)).sum(-1).clamp_min(0.0)
        diffuse = 0.36 + 0.62 * ndl + 0.22 * ndf
        out = albedo * diffuse[:, None] + (0.08 * ndh.pow(10) * vis)[:, None]  # rubber
        m = metal.nonzero(as_tuple=True)[0]
        if m.numel():
            dm, xm, nm = dirs[m], x[m], n[m]
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
            hm, vm = ndh[m], vis[m]
            # A vertical side mirrors only the floor (its mirror rays point down as the view
            # rays do), so the lights appear as CLEVR's area lights do on a metal cylinder: a
            # sharp vertical stripe where the side faces the light's azimuth (half vectors
            # taken in the horizontal plane), and a weaker one for the fill light.
            shape = ob.shape[b[m], k[m]]
            upright = nm[:, 2].abs() < 0.5
            side = (shape == _CYL) & upright
            hl = self._stripe(nm, dm, L) * vm
            hf = self._stripe(nm, dm, F)
            hs = torch.where(side, hl.pow(40) + 0.35 * hf.pow(40), 0.0)
            sheen = torch.where(side, 0.5 * hl.pow(6), 0.45 * hm.pow(16) * vm)
            # A flat mirror face catches the same light as a tinted glint over the whole face.
            sheen = sheen + torch.where((shape == _CUBE) & upright, 0.4 * hl.pow(8), 0.0)
            out[m] = (
                albedo[m] * (0.05 + 0.2 * ndl[m] + sheen)[:, None]
                + 1.1 * albedo[m] * env * fres[:, None]
                + (1.2 * (hm.pow(150) * vm + hs))[:, None]
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
        their 3 x 3 mean, in place. img (B, 3, H, W) (a view), ids (B, H, W)."""
        B, _, H, W = img.shape
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
        blur = img[eb[:, None], :, ny, nx].mean(1)  # (E, 9, 3) -> (E, 3)
        img[eb, :, ey, ex] = 0.5 * (img[eb, :, ey, ex] + blur)

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

    def render_uint8(self, records: Sequence[dict]) -> tuple[np.ndarray, torch.Tensor]:
        """Render and return ``(uint8 array (B, H, W, 3), float tensor (B, 3, H, W))``."""
        img = self.render(records).data
        return _uint8(img).permute(0, 2, 3, 1).cpu().numpy(), img

    def export(
        self,
        records: Sequence[dict],
        folder: Path | None = None,
        names: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Images as uint8 (B, 3, H, W) (the float images x 255, rounded), and with `folder`
        one PNG per record (see `Renderer.export`), each renamed into place but not flushed
        to disk one by one (an fsync per file cost 7 ms of wall time per image on a shared
        machine): callers publish the whole folder (`curi.atomic.atomic_dir`)."""
        with torch.inference_mode():  # render's output is an inference tensor, changed in place
            img = self.render(records).data  # (B, 3, H, W)
            u8 = _uint8(img, in_place=True).cpu().numpy()  # no temporaries
        if folder is not None:
            hwc = np.ascontiguousarray(u8.transpose(0, 2, 3, 1))  # (B, H, W, 3), one copy
            for im, name in zip(hwc, names, strict=True):
                save_png(im, folder / f"{name}{self.file_suffix}", fsync=False)
        return {"data": u8}

    def file_bytes(self, records: Sequence[dict]) -> list[bytes]:
        """One PNG file's bytes per record (exports with rendered files)."""
        u8, _ = self.render_uint8(records)
        return [png_bytes(im) for im in u8]


def _uint8(img: torch.Tensor, *, in_place: bool = False) -> torch.Tensor:
    """Float images in [0, 1] as uint8, round(255 x): the one quantisation of every PNG and
    export; `in_place` reuses `img`'s memory (it is overwritten)."""
    x = img.mul_(255.0) if in_place else img * 255.0
    return x.add_(0.5).clamp_(0, 255).to(torch.uint8)


def render_images(
    records: Sequence[dict], *, width: int = 240, height: int = 160, device: str = "cpu"
) -> tuple[np.ndarray, torch.Tensor]:
    """Render scene records: ``(uint8 (B, H, W, 3), float32 (B, 3, H, W) in [0, 1])``."""
    return ImageRenderer(width=width, height=height, device=device).render_uint8(records)


PNG_LEVEL = 1
"""zlib level of the PNGs written (lossless at every level): 1 encoded a 240 x 160 scene in
half the CPU time of PIL's default 6 (1.8 against 3.8 ms on a shared machine) for files 1.5x
larger (12 against 8 kB), see docs/benchmarks.md."""


def _pil(image: np.ndarray | torch.Tensor):
    from PIL import Image

    if isinstance(image, torch.Tensor):
        image = (image.detach().cpu().clamp(0, 1) * 255 + 0.5).to(torch.uint8)
        image = image.permute(1, 2, 0).numpy()
    return Image.fromarray(np.ascontiguousarray(image))


def save_png(image: np.ndarray | torch.Tensor, path: str | Path, *, fsync: bool = True) -> Path:
    """Write one image, uint8 (H, W, 3) or float (3, H, W) in [0, 1], as a PNG (`PNG_LEVEL`),
    atomically; `fsync`: flush it to disk before the rename (see `curi.atomic.atomic_path`)."""
    path = Path(path)
    with atomic_path(path, fsync=fsync) as tmp:
        _pil(image).save(tmp, format="PNG", compress_level=PNG_LEVEL)
    return path


def png_bytes(image: np.ndarray | torch.Tensor) -> bytes:
    """One image, uint8 (H, W, 3) or float (3, H, W) in [0, 1], as the bytes of a PNG file
    (`PNG_LEVEL`)."""
    buf = io.BytesIO()
    _pil(image).save(buf, format="PNG", compress_level=PNG_LEVEL)
    return buf.getvalue()
