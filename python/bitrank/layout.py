"""The BLR layout of docs/FORMAT.md in torch tensors: sign bitmaps and their unpacking.

A layer of P paths and rank r over W [m][n] holds u uint8 [P][m][rb], v uint8 [P][n][rb]
(rb = ceil(r/8); sign k of a row is bit k%8, least significant first, of byte k//8;
bit 1 = +1, bit 0 = -1; bits past r are 0) and scales h [P][m], l [P][r], g [P][n]:

    W = sum_p diag(h_p) . S_U,p . diag(l_p) . S_V,p^T . diag(g_p)
"""
import torch



def _weights(device):
    return (2 ** torch.arange(8, device=device, dtype=torch.int32)).to(torch.uint8)


def pack_signs(s):
    """±1 (or any real: >= 0 counts as +1) [..., r] -> uint8 [..., ceil(r/8)]."""
    r = s.shape[-1]
    rb = (r + 7) // 8
    bits = (s >= 0).to(torch.uint8)
    pad = rb * 8 - r
    if pad:
        bits = torch.nn.functional.pad(bits, (0, pad))
    bits = bits.reshape(*s.shape[:-1], rb, 8)
    return (bits * _weights(s.device)).sum(-1, dtype=torch.int32).to(torch.uint8)


def unpack_signs(bits, r, dtype=torch.float32):
    """uint8 [..., rb] -> ±1 [..., r] of `dtype`."""
    b = bits.unsqueeze(-1).bitwise_and(_weights(bits.device)).ne(0)
    b = b.reshape(*bits.shape[:-1], bits.shape[-1] * 8)[..., :r]
    return b.to(dtype) * 2 - 1


def words32(bits, r):
    """uint8 [rows][rb] -> int32 [rows][ceil(r/32)]: the library's u32 bitmap words
    (little-endian bytes of a word are its bits 0..31, so the bytes, padded to whole
    words, are the words)."""
    rw = (r + 31) // 32
    pad = rw * 4 - bits.shape[-1]
    if pad:
        bits = torch.nn.functional.pad(bits, (0, pad))
    return bits.contiguous().view(torch.int32)


def bytes_from_words(words, r):
    """The inverse of words32: int32 [rows][ceil(r/32)] -> uint8 [rows][ceil(r/8)] with
    the bits past r cleared."""
    rb = (r + 7) // 8
    b = words.contiguous().view(torch.uint8)[..., :rb].clone()
    tail = r % 8
    if tail:
        b[..., -1] &= (1 << tail) - 1
    return b


def reconstruct(u, v, h, l, g, r, dtype=torch.float64):
    """The dense W [m][n] of a layer, summed in `dtype` (float64 for references)."""
    su = unpack_signs(u, r, dtype)
    sv = unpack_signs(v, r, dtype)
    w = 0
    for p in range(u.shape[0]):
        w = w + h[p].to(dtype)[:, None] * ((su[p] * l[p].to(dtype)) @ sv[p].T) \
            * g[p].to(dtype)[None, :]
    return w


def bpw(m, n, r, paths):
    """Bits per weight with one bit per sign and 16 per scale (docs/FORMAT.md)."""
    return paths * (r * (m + n) + 16 * (m + n + r)) / (m * n)


def rank_for(m, n, paths, bits):
    """The largest rank whose bpw is <= bits, capped at min(m, n); 0 if rank 1 does not fit."""
    # paths*(r*(m+n) + 16*(m+n+r)) <= bits*m*n  ->  r <= (bits*m*n/paths - 16(m+n)) / (m+n+16)
    r = int((bits * m * n / paths - 16 * (m + n)) // (m + n + 16))
    while r >= 1 and bpw(m, n, r, paths) > bits + 1e-12:
        r -= 1
    while bpw(m, n, r + 1, paths) <= bits + 1e-12 and r + 1 <= min(m, n):
        r += 1
    return max(0, min(r, min(m, n)))
