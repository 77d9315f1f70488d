"""The unexplained shapes' book (issue 40 §1): shapes, masking, caps, merging across workers."""

from __future__ import annotations

from proxy.observation.shapes import Shape, ShapeBook, ShapeLimits, masked_line, merge, shape_of


def _json(route: str, status: int, body: object) -> Shape:
    return shape_of(route, status, "application/json", body, "", is_json=True)


def test_answers_that_differ_only_in_their_values_are_one_shape() -> None:
    """Two JSON errors with the same keys and value types, other values, are the same shape."""
    one = _json("api", 422, {"errcode": "E1", "errmsg": "qty 5 is too big", "param": "qty"})
    two = _json("api", 422, {"errcode": "E2", "errmsg": "name is empty", "param": "name"})
    assert one == two


def test_a_json_shape_names_its_key_paths_and_value_types() -> None:
    """Nested objects read as dotted paths, an array by its first member, with JSON types."""
    shape = _json("api", 400, {"error": {"code": 7, "details": [{"field": "a", "ok": True}]}})
    assert shape.structure == (
        "error.code:number",
        "error.details[].field:string",
        "error.details[].ok:boolean",
    )


def test_a_text_line_has_its_numbers_ids_and_quoted_values_masked() -> None:
    """Order numbers, UUIDs, long hex ids and quoted values do not make new shapes."""
    uuid = "123e4567-e89b-12d3-a456-426614174000"
    line = f'Order 12345 for "bob" not found (trace 9f8e7d6c5b4a3f2e1d0c, {uuid})'
    assert masked_line(line) == 'Order <n> for "..." not found (trace <id>, <id>)'


def test_an_html_page_is_shaped_by_its_title() -> None:
    """Two error pages whose titles differ in a number are one shape, kind ``html``."""
    page = "<html><head><title>Invoice {} is locked</title></head><body>{}</body></html>"
    one = shape_of("api", 409, "text/html", None, page.format(17, "a"), is_json=False)
    two = shape_of(
        "api", 409, "text/html; charset=utf-8", None, page.format(18, "b"), is_json=False
    )
    assert one == two
    assert (one.kind, one.structure) == ("html", ("Invoice <n> is locked",))


def test_the_book_counts_a_shape_and_keeps_its_first_sample() -> None:
    """The second answer of a shape counts; the sample stays the first one's."""
    book = ShapeBook()
    shape = _json("api", 422, {"m": "x"})
    book.record(shape, rule="fallback.422", sample="first", headers={}, now=1.0)
    seen = book.record(shape, rule="fallback.422", sample="second", headers={}, now=2.0)
    assert (seen.count, seen.sample, seen.first_seen, seen.last_seen) == (2, "first", 1.0, 2.0)


def test_the_book_pushes_out_the_least_recently_seen_shape_per_route() -> None:
    """Past ``max_per_route`` a route's least recently seen shape goes; other routes keep theirs."""
    book = ShapeBook(ShapeLimits(max_shapes=10, max_per_route=2))
    other = _json("other", 500, {"a": 1})
    book.record(other, rule="fallback.500", sample="", headers={})
    shapes = [_json("api", status, {"m": "x"}) for status in (400, 404, 409)]
    for shape in shapes:
        book.record(shape, rule="fallback.4xx", sample="", headers={})
    kept = {seen.shape for seen in book.entries()}
    assert kept == {other, shapes[1], shapes[2]}


def test_the_book_holds_at_most_max_shapes_in_all() -> None:
    """Past ``max_shapes`` the least recently seen shape of any route goes."""
    book = ShapeBook(ShapeLimits(max_shapes=3, max_per_route=3))
    for route in "abcd":
        book.record(_json(route, 500, {}), rule="fallback.500", sample="", headers={})
    assert [seen.shape.route for seen in book.entries()] == ["d", "c", "b"]


def test_a_sample_is_cut_to_its_cap() -> None:
    """A long body's sample keeps ``sample_chars`` characters."""
    book = ShapeBook(ShapeLimits(sample_chars=10))
    seen = book.record(_json("a", 500, {}), rule="fallback.500", sample="x" * 100, headers={})
    assert seen.sample == "x" * 10


def test_workers_books_merge_into_one_count_per_shape() -> None:
    """Two workers' dumps of the same shape are one entry with the counts summed."""
    shape = _json("api", 422, {"m": "x"})
    books = []
    for count in (2, 3):
        book = ShapeBook()
        for _ in range(count):
            book.record(shape, rule="fallback.422", sample="s", headers={})
        books.append(book.dump())
    merged = merge(books, ShapeLimits())
    assert [(seen.shape, seen.count) for seen in merged] == [(shape, 5)]
