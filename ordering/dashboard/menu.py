"""Menu and stock: list dishes, add one, edit price, stock and availability."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from idempotency.web.forms import idempotent_form
from ordering.dashboard.access import found, member_required, render_page, save_posted, tenant_of
from ordering.dashboard.forms import DishCreateForm, DishUpdateForm
from ordering.models import Dish
from ordering.selectors import dish_of, dishes_of
from ordering.services.menu import MenuError, MenuErrorCode, create_dish, update_dish
from tenants.permissions import Area


@member_required(Area.MENU)
@require_http_methods(["GET", "HEAD", "POST"])
@idempotent_form(fields=("name", "description", "price", "stock", "active"))
def menu(request: HttpRequest) -> HttpResponse:
    """GET: the dishes and an "add dish" form. POST: add the dish, or show the form's errors."""
    tenant = tenant_of(request)
    form = DishCreateForm(request.POST if request.method == "POST" else None)
    dish = save_posted(request, form, lambda data: create_dish(tenant=tenant, **data))
    if dish is not None:
        messages.success(request, f"Added {dish.name}.")
        return redirect("dash-menu")
    return render_page(
        request,
        "dashboard/menu.html",
        {"dishes": dishes_of(tenant=tenant), "form": form},
        section="menu",
        status=400 if form.is_bound else 200,
    )


@member_required(Area.MENU)
@require_http_methods(["GET", "HEAD", "POST"])
@idempotent_form(fields=("price", "stock", "active", "stock_seen", "price_seen", "active_seen"))
def dish_edit(request: HttpRequest, dish_id: int) -> HttpResponse:
    """GET: the edit form. POST: save price/availability, and stock unless orders moved it."""
    tenant = tenant_of(request)
    dish = found(dish_of(tenant=tenant, dish_id=dish_id))
    if request.method == "POST":
        form = DishUpdateForm(request.POST)
        if form.is_valid():
            try:
                dish = update_dish(tenant=tenant, dish_id=dish.pk, **form.cleaned_data)
            except MenuError as exc:
                if exc.code == MenuErrorCode.NOT_FOUND:
                    raise Http404(exc.message) from exc
                dish = dish_of(tenant=tenant, dish_id=dish.pk) or dish
                form = _shown_again(form, dish)
                form.add_error(exc.field, exc.message)
            else:
                messages.success(request, f"Saved {dish.name}.")
                return redirect("dash-menu")
    else:
        form = DishUpdateForm(initial=_initial(dish))
    return render_page(
        request,
        "dashboard/dish_edit.html",
        {"dish": dish, "form": form},
        section="menu",
        status=400 if form.is_bound else 200,
    )


def _initial(dish: Dish) -> dict[str, object]:
    return {
        "price": dish.price,
        "stock": dish.stock,
        "active": dish.active,
        "stock_seen": dish.stock,
        "price_seen": dish.price,
        "active_seen": dish.active,
    }


def _shown_again(refused: DishUpdateForm, dish: Dish) -> DishUpdateForm:
    """The form of a refused edit, against the dish as it is now: what the merchant changed
    stays as typed, what they left alone shows the current value (kept as shown, saving
    again would write back the value that moved), and every ``*_seen`` is the current one."""
    typed = refused.cleaned_data
    now = _initial(dish)
    data = {**refused.data.dict(), **{f"{f}_seen": now[f] for f in ("price", "stock", "active")}}
    for field in ("price", "stock", "active"):
        seen = typed.get(f"{field}_seen")
        if seen is not None and typed[field] == seen:
            data[field] = now[field]
    if not data.get("active"):
        data.pop("active", None)  # an unticked box is a missing field
    form = DishUpdateForm(data)
    form.is_valid()
    return form
