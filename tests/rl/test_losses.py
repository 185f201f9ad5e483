"""DPPO / GRPO / k3 losses and gradients against a NumPy reference of recipe.md's formulas."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax import rl
from tmax_jax.rl import losses

jax.config.update("jax_enable_x64", False)


def _np_tv(lp, blp):
  return np.abs(np.exp(lp) - np.exp(blp))


def _np_kl(lp, blp):
  pi = np.clip(np.exp(lp), 1e-9, 1 - 1e-9)
  mu = np.clip(np.exp(blp), 1e-9, 1 - 1e-9)
  return mu * np.log(mu / pi) + (1 - mu) * np.log((1 - mu) / (1 - pi))


def np_dppo(lp, blp, adv, mask, kind, delta):
  """Returns (per-token loss, d loss / d logp, kept) by the recipe's formulas, in float64."""
  lp, blp, adv = (np.asarray(v, np.float64) for v in (lp, blp, adv))
  r = np.exp(lp - blp)
  div = _np_tv(lp, blp) if kind == "tv" else _np_kl(lp, blp)
  drop = (div > delta) & (((adv > 0) & (r > 1)) | ((adv < 0) & (r < 1)))
  kept = (mask > 0) & ~drop
  loss = np.where(kept, -adv * r, 0.0)
  grad = np.where(kept, -adv * r, 0.0)  # d(-A r)/d logp = -A r
  return loss, grad, kept


def np_grpo(lp, blp, adv, mask, lo, hi):
  lp, blp, adv = (np.asarray(v, np.float64) for v in (lp, blp, adv))
  r = np.exp(lp - blp)
  s1, s2 = r * adv, np.clip(r, 1 - lo, 1 + hi) * adv
  loss = np.where(mask > 0, -np.minimum(s1, s2), 0.0)
  use1 = s1 <= s2
  grad = np.where((mask > 0) & use1, -adv * r, 0.0)
  return loss, grad


def _inputs(seed, b=4, t=64):
  """Random inputs populating all four cases (A>0/A<0 x inside/outside region), both directions."""
  rng = np.random.default_rng(seed)
  blp = np.log(rng.uniform(0.02, 0.98, (b, t)))
  # current policy: small and large moves both up and down
  shift = rng.choice([-2.0, -0.6, -0.05, 0.05, 0.6, 2.0], (b, t))
  p = np.clip(np.exp(blp) * np.exp(shift), 1e-4, 0.999)
  lp = np.log(p)
  adv = np.repeat(rng.choice([-1.0, -0.3, 0.5, 1.0], (b, 1)), t, axis=1)
  adv[0, : t // 2] = 0.7
  adv[0, t // 2 :] = -0.7
  mask = (rng.uniform(size=(b, t)) > 0.25).astype(np.float32)
  return [a.astype(np.float32) for a in (lp, blp, adv)] + [mask]


def _loss_and_grad(fn, lp, blp, adv, mask, hyper):
  def total(logp):
    terms = fn(rl.PolicyInputs(logp, jnp.asarray(blp), jnp.asarray(adv), jnp.asarray(mask)), hyper)
    return jnp.sum(terms.loss), terms

  (_, terms), g = jax.value_and_grad(total, has_aux=True)(jnp.asarray(lp))
  return np.asarray(terms.loss), np.asarray(g), np.asarray(terms.kept)


@pytest.mark.parametrize("kind", ["tv", "kl"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dppo_matches_numpy(kind, seed):
  lp, blp, adv, mask = _inputs(seed)
  delta = losses.DIVERGENCES[kind].delta
  loss, grad, kept = _loss_and_grad(
    rl.get("policy_loss", "dppo"),
    lp,
    blp,
    adv,
    mask,
    losses.DPPOHyper(divergence=kind, delta=delta),
  )
  ref_loss, ref_grad, ref_kept = np_dppo(lp, blp, adv, mask, kind, delta)
  np.testing.assert_array_equal(kept.astype(bool), ref_kept)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6)
  # the random inputs really exercise every case of the mask
  r = np.exp(lp.astype(np.float64) - blp)
  div = _np_tv(lp, blp) if kind == "tv" else _np_kl(lp, blp)
  on = mask > 0
  for a_pos in (True, False):
    side = (adv > 0) if a_pos else (adv < 0)
    inside = on & side & (div <= delta)
    out_away = on & side & (div > delta) & ((r > 1) if a_pos else (r < 1))
    out_back = on & side & (div > delta) & ((r < 1) if a_pos else (r > 1))
    assert inside.any() and out_away.any() and out_back.any(), (a_pos, kind)
    assert kept[inside].all() and not kept[out_away].any()
    assert kept[out_back].all(), "tokens moving back toward mu must be kept"
    assert (grad[out_back] != 0).all()


def test_dppo_masked_tokens_have_exactly_zero_gradient_even_with_garbage():
  lp, blp, adv, mask = _inputs(3)
  blp = np.where(mask > 0, blp, np.nan).astype(np.float32)  # padding garbage
  blp[0, -1] = -np.inf if mask[0, -1] == 0 else blp[0, -1]
  for name, hyper in (
    ("dppo", losses.DPPOHyper(divergence="tv", delta=0.1)),
    ("dppo", losses.DPPOHyper(divergence="kl", delta=0.05)),
    ("grpo", losses.GRPOHyper(clip_low=0.2, clip_high=0.272)),
  ):
    loss, grad, kept = _loss_and_grad(rl.get("policy_loss", name), lp, blp, adv, mask, hyper)
    off = mask == 0
    assert np.all(grad[off] == 0.0) and np.all(loss[off] == 0.0) and np.all(kept[off] == 0)
    assert np.all(np.isfinite(grad)) and np.all(np.isfinite(loss))


def test_dppo_default_delta_and_unknown_divergence():
  lp, blp, adv, mask = _inputs(4)
  a = _loss_and_grad(losses.dppo, lp, blp, adv, mask, losses.DPPOHyper(divergence="kl"))
  b = _loss_and_grad(losses.dppo, lp, blp, adv, mask, losses.DPPOHyper(divergence="kl", delta=0.05))
  np.testing.assert_array_equal(a[2], b[2])
  with pytest.raises(ValueError, match="divergence='js'; expected one of"):
    losses.DPPOHyper(divergence="js")
  with pytest.raises(ValueError, match="unknown DPPO divergence"):
    losses.divergence(rl.PolicyInputs(*(jnp.asarray(v) for v in (lp, blp, adv, mask))), "js")


@pytest.mark.parametrize("seed", [0, 5])
def test_grpo_matches_numpy(seed):
  lp, blp, adv, mask = _inputs(seed)
  loss, grad, kept = _loss_and_grad(
    rl.get("policy_loss", "grpo"),
    lp,
    blp,
    adv,
    mask,
    losses.GRPOHyper(clip_low=0.2, clip_high=0.272),
  )
  ref_loss, ref_grad = np_grpo(lp, blp, adv, mask, 0.2, 0.272)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(kept > 0, (mask > 0) & (ref_grad != 0) | ((mask > 0) & (adv == 0)))
  assert (kept < (mask > 0)).any(), "some tokens must be clipped"


def np_topk(lp_k, blp_k, kind):
  pi, mu = np.exp(lp_k.astype(np.float64)), np.exp(blp_k.astype(np.float64))
  rp = np.clip(1 - pi.sum(-1), 1e-9, 1)
  rm = np.clip(1 - mu.sum(-1), 1e-9, 1)
  if kind == "topk_tv":
    return 0.5 * (np.abs(pi - mu).sum(-1) + np.abs(rp - rm))
  return (mu * (np.log(mu) - np.log(pi))).sum(-1) + rm * (np.log(rm) - np.log(rp))


@pytest.mark.parametrize("kind", ["topk_tv", "topk_kl"])
def test_dppo_topk_variant(kind):
  rng = np.random.default_rng(7)
  b, t, k, v = 3, 32, 4, 12
  logits_mu = rng.normal(size=(b, t, v)) * 2
  logits_pi = logits_mu + rng.normal(size=(b, t, v)) * rng.choice([0.05, 1.5], (b, t, 1))
  lmu = logits_mu - np.log(np.exp(logits_mu).sum(-1, keepdims=True))
  lpi = logits_pi - np.log(np.exp(logits_pi).sum(-1, keepdims=True))
  ids = np.argsort(-lmu, axis=-1)[..., :k]
  tok = ids[..., 0]  # sampled = the top token
  lp = np.take_along_axis(lpi, tok[..., None], -1)[..., 0].astype(np.float32)
  blp = np.take_along_axis(lmu, tok[..., None], -1)[..., 0].astype(np.float32)
  lp_k = np.take_along_axis(lpi, ids, -1).astype(np.float32)
  blp_k = np.take_along_axis(lmu, ids, -1).astype(np.float32)
  adv = np.repeat(np.array([[1.0], [-1.0], [0.5]], np.float32), t, 1)
  mask = np.ones((b, t), np.float32)
  delta = losses.DIVERGENCES[kind].delta
  x = rl.PolicyInputs(
    jnp.asarray(lp),
    jnp.asarray(blp),
    jnp.asarray(adv),
    jnp.asarray(mask),
    jnp.asarray(lp_k),
    jnp.asarray(blp_k),
  )
  div = np.asarray(losses.divergence(x, kind))
  ref = np_topk(lp_k, blp_k, kind)
  np.testing.assert_allclose(div, ref, rtol=1e-4, atol=1e-6)
  terms = losses.dppo(x, losses.DPPOHyper(divergence=kind, delta=delta))
  r = np.exp(lp.astype(np.float64) - blp)
  drop = (ref > delta) & (((adv > 0) & (r > 1)) | ((adv < 0) & (r < 1)))
  np.testing.assert_array_equal(np.asarray(terms.kept) > 0, ~drop)
  assert drop.any() and (~drop).any()
  # binary is a special case: K = 1 tokens + rest bucket equals the binary TV
  if kind == "topk_tv":
    one = np.asarray(losses.topk_tv(jnp.asarray(lp[..., None]), jnp.asarray(blp[..., None])))
    np.testing.assert_allclose(one, _np_tv(lp, blp), rtol=1e-5, atol=1e-6)


def test_topk_needs_topk_inputs():
  lp, blp, adv, mask = _inputs(0)
  with pytest.raises(ValueError, match="topk_logp"):
    losses.dppo(
      rl.PolicyInputs(*(jnp.asarray(a) for a in (lp, blp, adv, mask))),
      losses.DPPOHyper(divergence="topk_tv", delta=0.1),
    )


def test_k3_matches_numpy_and_grad():
  lp, blp, _, mask = _inputs(8)
  ref = blp  # any reference logprobs
  got, g = jax.value_and_grad(
    lambda x: jnp.sum(losses.k3_kl(x, jnp.asarray(ref), jnp.asarray(mask)))
  )(jnp.asarray(lp))
  d = ref.astype(np.float64) - lp
  want = np.where(mask > 0, np.exp(d) - d - 1, 0)
  np.testing.assert_allclose(float(got), want.sum(), rtol=1e-5)
  np.testing.assert_allclose(
    np.asarray(g), np.where(mask > 0, -np.exp(d) + 1, 0), rtol=1e-5, atol=1e-6
  )
  assert (want >= 0).all()


def test_registry_errors():
  with pytest.raises(KeyError, match="registered"):
    rl.get("policy_loss", "ppo2")
  with pytest.raises(KeyError, match="already registered"):
    rl.register("policy_loss", "dppo")(lambda x: x)


def test_losses_declare_hyperparameters_and_batch_inputs():
  from tmax_jax.train.batch import TrainBatch

  batch_fields = {f.name for f in dataclasses.fields(TrainBatch)}
  dppo, grpo, sft = (rl.entry("policy_loss", n) for n in ("dppo", "grpo", "sft"))
  assert (dppo.hyper, grpo.hyper, sft.hyper) == (losses.DPPOHyper, losses.GRPOHyper, None)
  assert dppo.inputs(losses.DPPOHyper()) == ("behaviour_logp", "advantages")
  assert dppo.inputs(losses.DPPOHyper(divergence="kl")) == ("behaviour_logp", "advantages")
  for kind in ("topk_tv", "topk_kl"):
    assert dppo.inputs(losses.DPPOHyper(divergence=kind)) == (
      "behaviour_logp",
      "advantages",
      "topk_ids",
      "behaviour_topk_logp",
    )
  assert grpo.inputs(losses.GRPOHyper()) == ("behaviour_logp", "advantages")
  assert sft.inputs(None) == ()
  for name in rl.names("policy_loss"):  # every declared input is a real batch field
    e = rl.entry("policy_loss", name)
    if e.hyper is losses.DPPOHyper:
      hypers = [losses.DPPOHyper(divergence=k) for k in losses.DIVERGENCES]
    else:
      hypers = [None if e.hyper is None else e.hyper()]
    for h in hypers:
      assert set(e.inputs(h)) <= batch_fields, (name, h)
  with pytest.raises(TypeError, match="hyper must be a dataclass"):
    rl.register("policy_loss", "bad_hyper", hyper=dict)
