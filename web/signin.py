"""Signing in to the web UI with an API token (one machine with SUNDIAL_API_TOKENS).

A browser cannot send `Authorization: Bearer`, so the UI asks for the token once and
keeps it in the signed session cookie; web/access.py reads it from there for requests
that carry no credential of their own. Behind Identity-Aware Proxy none of this is
needed: every request carries IAP's assertion.
"""

from __future__ import annotations

from flask import Blueprint, current_app, flash, redirect, render_template, request, session, url_for

from web.access import SESSION_TOKEN
from web.identity import Unauthenticated
from web.ui import error_pages

signin = Blueprint("signin", __name__)
error_pages(signin)


@signin.get("/signin")
def form():
    return render_template("ui/signin.html")


@signin.post("/signin")
def sign_in():
    from web.ui_actions import csrf_matches  # the UI's token guards this form as well

    if not csrf_matches():
        flash("The form's security token is missing or stale; try again.", "error")
        return redirect(url_for("signin.form"), code=303)
    token = request.form.get("token", "").strip()
    try:
        caller = current_app.config["SUNDIAL_IDENTIFIER"].identify({"Authorization": f"Bearer {token}"})
    except Unauthenticated:
        flash("That token is not known.", "error")
        return redirect(url_for("signin.form"), code=303)
    session[SESSION_TOKEN] = token
    flash(f"Signed in as {caller.principal}.", "ok")
    return redirect(url_for("ui.projects"), code=303)


@signin.post("/signout")
def sign_out():
    session.pop(SESSION_TOKEN, None)
    return redirect(url_for("signin.form"), code=303)
