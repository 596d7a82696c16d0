"""The tolerance headers: what a lenient create left out, named safely and boundedly."""

from __future__ import annotations

from proxy.core.request.tolerance import MAX_NAMED, tolerance_headers


def test_nothing_left_out_means_no_headers() -> None:
    assert tolerance_headers((), ()) == {}


def test_names_are_comma_separated_and_tools_named_once() -> None:
    headers = tolerance_headers(("colour", "shade"), ("web_search", "image_generation",
                                                      "web_search"))
    assert headers == {"x-proxy-ignored-params": "colour,shade",
                       "x-proxy-dropped-tools": "web_search,image_generation"}


def test_hostile_keys_cannot_break_the_header() -> None:
    value = tolerance_headers(("a,b", "x\r\nset-cookie: y", "naïve"), ())[
        "x-proxy-ignored-params"]
    assert value == "a%2Cb,x%0D%0Aset-cookie%3A%20y,na%C3%AFve"
    value.encode("ascii")


def test_the_number_of_names_is_bounded() -> None:
    keys = tuple(f"k{i}" for i in range(MAX_NAMED + 10))
    value = tolerance_headers(keys, ())["x-proxy-ignored-params"]
    assert value.split(",")[-1] == "+10-more" and len(value.split(",")) == MAX_NAMED + 1
