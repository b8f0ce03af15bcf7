"""Signing in to the web UI with an API token (one machine with SUNDIAL_API_TOKENS).

A browser cannot send `Authorization: Bearer`, so the UI asks for the token once and
keeps a session (web/sessions.py: a digest of the token, never the token itself);
web/access.py reads it for requests that carry no credential of their own. Behind
Identity-Aware Proxy none of this is needed: every request carries IAP's assertion.
Both forms carry the UI's CSRF token, so no other site can sign a browser in or out.
"""

from __future__ import annotations

from flask import Blueprint, current_app, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from web import sessions
from web.identity import Unauthenticated
from web.ui import error_pages

signin = Blueprint("signin", __name__)
error_pages(signin)


@signin.get("/signin")
def form() -> ResponseReturnValue:
    return render_template("ui/signin.html")


@signin.post("/signin")
def sign_in() -> ResponseReturnValue:
    if not sessions.csrf_matches():
        flash("The form's security token is missing or stale; try again.", "error")
        return redirect(url_for("signin.form"), code=303)
    token = request.form.get("token", "").strip()
    try:
        caller = current_app.config["SUNDIAL_IDENTIFIER"].identify({"Authorization": f"Bearer {token}"})
    except Unauthenticated:
        flash("That token is not known.", "error")
        return redirect(url_for("signin.form"), code=303)
    sessions.sign_in(token)
    flash(f"Signed in as {caller.principal}.", "ok")
    return redirect(url_for("ui.projects"), code=303)


@signin.post("/signout")
def sign_out() -> ResponseReturnValue:
    if not sessions.csrf_matches():
        flash("The form's security token is missing or stale; try again.", "error")
        return redirect(url_for("signin.form"), code=303)
    sessions.sign_out()
    return redirect(url_for("signin.form"), code=303)
